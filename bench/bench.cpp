#include "bench.hpp"

#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <stdexcept>

#include "peers.hpp"
#include "sluice/byte_size.hpp"
#include "sluice/chunking.hpp"
#include "sluice/device.hpp"
#include "sluice/error.hpp"
#include "sluice/fixed_costs.hpp"
#include "sluice/staging_pool.hpp"
#include "sluice/staging_rates.hpp"

namespace sluice::bench {

using workloads::Problem;

double detail::predict_ms(const BenchResult& result, const BenchCase& c, const Problem& problem,
                          const PipelineOptions& options, bool staged) {
  ModelInput in;
  in.rates = c.bound.rates;
  in.fixed = result.fixed;
  in.kernel.ms_per_item = c.bound.kernel_ms / static_cast<double>(std::max<std::size_t>(problem.items(), 1));
  in.plan = plan_chunks(options, problem.items(), sizeof(float));
  in.depth = options.depth;
  in.out_slots = options.depth + 1;
  in.in_item_bytes = sizeof(float) * problem.workload().input_count();
  in.out_item_bytes = sizeof(float);
  in.staged_in = in.staged_out = staged;
  return predict(in).ms;
}

namespace {

class CaseRunner {
 public:
  CaseRunner(BenchResult& result, const BenchOptions& options, const std::function<void(const std::string&)>& progress)
      : result_(result), options_(options), progress_(progress) {}

  MeasuredRow measure(std::string method, Problem& problem, bool sluice, const std::function<void()>& run) {
    MeasuredRow row = workloads::measure_row(std::move(method), problem, sluice, options_.repeats, run);
    report(row);
    return row;
  }

  void report(const MeasuredRow& row) {
    if (progress_)
      progress_(fmt::format("{} {} {}: {:.2f} ms, {}", row.workload, format_bytes(row.bytes), row.method,
                            row.ms.median, row.verified ? "verified" : "NOT VERIFIED: " + row.detail));
  }

  // One recorded run, untimed: where each engine's time went, kept as a trace.
  void record_lanes(const std::string& method, Problem& problem, PipelineOptions options, double bound_ms) {
    const std::string title =
        fmt::format("{} {}: {}", problem.workload().name(), format_bytes(problem.items() * sizeof(float)), method);
    Trace trace = workloads::traced_pipeline(title, problem, options, bound_ms);
    if (progress_) {
      std::string busy;
      for (const auto& lane : analyze(trace).lanes)
        busy += fmt::format(" {} {:.2f} ms,", to_string(lane.lane), lane.busy_ms);
      progress_(fmt::format("  lanes, {}: wall {:.2f} ms; busy:{}", title, trace.wall_ms, busy));
    }
    result_.traces.push_back(std::move(trace));
  }

  // First runs of the automatic policy over the pageable arrays: what a user
  // streaming the memory once pays. The pipeline's slots are allocated
  // beforehand on the pinned arrays, as a reused pipeline's would be; moving
  // the spans back after each run undoes the registration, untimed.
  MeasuredRow automatic_first_runs(Problem& pageable, Problem& pinned, PipelineOptions options) {
    options.host_memory = HostMemoryPolicy::automatic;
    auto wp = workloads::make_workload_pipeline(pinned, options);
    wp.run();
    MeasuredRow row;
    row.workload = pageable.workload().name();
    row.bytes = pageable.items() * sizeof(float);
    row.method = "sluice pageable, automatic, first run";
    row.sluice = true;
    row.memory = "pageable";
    row.verified = true;
    std::vector<double> samples;
    for (int i = -1; i < options_.repeats; ++i) {
      wp.bind(pageable);
      pageable.poison_output();
      const auto begin = std::chrono::steady_clock::now();
      wp.run();
      const auto end = std::chrono::steady_clock::now();
      if (i >= 0) samples.push_back(std::chrono::duration<double, std::milli>(end - begin).count());
      if (const auto v = pageable.verify(); !v.ok && row.verified) {
        row.verified = false;
        row.detail = v.detail;
      }
      wp.bind(pinned);
    }
    row.ms = summarize(samples);
    row.gbps = gb_per_s(pageable.bytes_moved(), row.ms.median);
    report(row);
    return row;
  }

  // Later runs of the automatic policy: run until the spans are registered.
  MeasuredRow automatic_later_runs(Problem& problem, PipelineOptions options) {
    options.host_memory = HostMemoryPolicy::automatic;
    Pipeline p = workloads::make_pipeline(problem, options);
    int runs = 1;
    for (; runs <= 20; ++runs) {
      const RunReport r = p.run();
      if (r.volume.staged_in_bytes == 0 && r.volume.staged_out_bytes == 0) break;
    }
    MeasuredRow row = measure(fmt::format("sluice pageable, automatic, runs after the {}", ordinal(runs)), problem, true,
                              [&] { p.run(); });
    row.memory = "registered";
    return row;
  }

  void run_case(const workloads::Workload& w, std::size_t bytes) {
    const std::size_t items = bytes / sizeof(float);
    Problem pinned(w, items, Problem::Memory::pinned);
    std::optional<Problem> pageable;
    if (options_.host_rows) pageable.emplace(w, items, Problem::Memory::pageable);
    StagingPool pool(options_.pipeline.staging_threads);
    BenchCase c{w.name(), bytes, workloads::absolute_bound(pinned, options_.device, options_.repeats,
                                                           options_.host_rows ? &pool : nullptr)};
    std::vector<MeasuredRow> rows;
    const PipelineOptions& base = options_.pipeline;

    {
      auto sync = workloads::make_synchronous(pinned);
      rows.push_back(measure("synchronous", pinned, false, [&] { sync->run(pinned); }));
      if (pageable) rows.push_back(measure("synchronous, pageable", *pageable, false, [&] { sync->run(*pageable); }));
    }
    std::optional<MeasuredRow> best, four;
    for (unsigned n : options_.staircase_streams) {
      auto staircase = workloads::make_staircase(pinned, n);
      MeasuredRow row = measure(staircase->name(), pinned, false, [&] { staircase->run(pinned); });
      if (n == 4) four = row;
      if (!best || row.ms.median < best->ms.median) best = row;
    }
    if (four) rows.push_back(*four);
    if (best && (!four || best->method != four->method)) {
      best->method += " (best of sweep)";
      rows.push_back(*best);
    }
    std::optional<MeasuredRow> best_triple;
    for (std::size_t chunk_bytes : options_.triple_buffer_chunk_bytes) {
      auto triple = workloads::make_triple_buffer(pinned, std::min(items, chunk_bytes / sizeof(float)));
      MeasuredRow row = measure(triple->name() + ", " + format_bytes(chunk_bytes) + " chunks", pinned, false,
                                [&] { triple->run(pinned); });
      if (!best_triple || row.ms.median < best_triple->ms.median) best_triple = row;
    }
    if (best_triple) {
      best_triple->method += " (best of sweep)";
      rows.push_back(*best_triple);
    }

    Pipeline sluice_pinned = workloads::make_pipeline(pinned, base);
    rows.push_back(measure("sluice pinned", pinned, true, [&] { sluice_pinned.run(); }));
    rows.back().model_ms = detail::predict_ms(result_, c, pinned, base, false);
    PipelineOptions concurrent = base;
    concurrent.compute_streams = 2;
    Pipeline sluice_concurrent = workloads::make_pipeline(pinned, concurrent);
    rows.push_back(measure("sluice pinned, 2 compute streams", pinned, true, [&] { sluice_concurrent.run(); }));
    rows.back().model_ms = detail::predict_ms(result_, c, pinned, concurrent, false);
    record_lanes("sluice pinned", pinned, base, c.bound.pinned.ms);

    if (pageable) {
      PipelineOptions staged = base;
      staged.host_memory = HostMemoryPolicy::stage;
      Pipeline sluice_staged = workloads::make_pipeline(*pageable, staged);
      rows.push_back(measure("sluice pageable, staged", *pageable, true, [&] { sluice_staged.run(); }));
      rows.back().model_ms = detail::predict_ms(result_, c, *pageable, staged, true);
      record_lanes("sluice pageable, staged", *pageable, staged, c.bound.staged.ms);
      PipelineOptions registered = base;
      registered.host_memory = HostMemoryPolicy::register_memory;
      {
        Pipeline sluice_registered = workloads::make_pipeline(*pageable, registered);
        rows.push_back(measure("sluice pageable, registered (in the warm-up run)", *pageable, true,
                               [&] { sluice_registered.run(); }));
        rows.back().memory = "registered";
        rows.back().model_ms = detail::predict_ms(result_, c, *pageable, registered, false);
      }
      rows.push_back(automatic_first_runs(*pageable, pinned, base));
      rows.back().model_ms = detail::predict_ms(result_, c, *pageable, staged, true);
      rows.push_back(automatic_later_runs(*pageable, base));
      rows.back().model_ms = detail::predict_ms(result_, c, *pageable, base, false);
    }
    for (auto& row : torch_rows_for(w.name(), bytes)) rows.push_back(row);

    const double sync_ms = rows.front().ms.median;
    for (auto& row : rows) {
      const bool host_pass = row.memory == "pageable";
      const Bound& bound = host_pass && c.bound.staged.ms > 0 ? c.bound.staged : c.bound.pinned;
      row.speedup = sync_ms / row.ms.median;
      row.bound_ms = bound.ms;
      row.bound_term = bound.limiter;
      row.efficiency = efficiency(bound.ms, row.ms.median);
      result_.rows.push_back(row);
    }
    result_.cases.push_back(std::move(c));
  }

  std::vector<MeasuredRow> torch_rows;

 private:
  static std::string ordinal(int n) {
    return std::to_string(n) + (n == 1 ? "st" : n == 2 ? "nd" : n == 3 ? "rd" : "th");
  }
  std::vector<MeasuredRow> torch_rows_for(const std::string& workload, std::size_t bytes) const {
    std::vector<MeasuredRow> out;
    for (const auto& row : torch_rows)
      if (row.workload == workload && row.bytes == bytes) out.push_back(row);
    return out;
  }

  BenchResult& result_;
  const BenchOptions& options_;
  const std::function<void(const std::string&)>& progress_;
};

}  // namespace

BenchResult run_bench(const BenchOptions& options, const std::function<void(const std::string&)>& progress) {
  if (options.workloads.empty() && options.file_bytes == 0) throw std::invalid_argument("bench: no workloads");
  if (!options.workloads.empty() && options.sizes.empty()) throw std::invalid_argument("bench: no sizes");
  if (options.repeats < 1) throw std::invalid_argument("bench: repeats must be at least 1");
  for (std::size_t bytes : options.sizes)
    if (bytes < sizeof(float)) throw std::invalid_argument("bench: size " + std::to_string(bytes) + " is below one item");
  Device device(options.device);
  device.make_current();
  BenchResult result;
  result.device = device.info();
  result.repeats = options.repeats;
  result.link = link_rates(options.device);
  result.fixed = measure_fixed_costs(options.device);
  {
    // The model's cost of a run itself: a one-item run, less its copies and launch.
    workloads::Problem one(workloads::parse_workload("copy"), 1, Problem::Memory::pinned);
    Pipeline p = workloads::make_pipeline(one, options.pipeline);
    const auto samples = workloads::measure_row("one item", one, true, 20, [&] { p.run(); });
    result.fixed.run_ms = std::max(0.0, samples.ms.median - 2 * result.fixed.copy_ms - result.fixed.launch_ms);
  }
  if (options.host_rows || options.file_bytes > 0) {
    StagingPool pool(options.pipeline.staging_threads);
    result.host_idle_link = host_copy_rates(pool);
    result.host = staging_rates(options.device, pool);
  }
  CaseRunner runner(result, options, progress);
  if (!options.torch_peer.empty() && !options.workloads.empty()) {
    std::string note;
    runner.torch_rows = detail::torch_rows(options, note);
    if (!note.empty()) result.notes.push_back(note);
  }
  for (std::size_t bytes : options.sizes)
    for (const auto& w : options.workloads) runner.run_case(w, bytes);
  if (options.file_bytes > 0) detail::run_file_cases(options, result, progress);
  return result;
}

}  // namespace sluice::bench
