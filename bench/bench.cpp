#include "bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

#include "absolute_bound.hpp"
#include "bound/staging_rates.hpp"
#include "core/staging_pool.hpp"
#include "host_alone.hpp"
#include "measure.hpp"
#include "measure/fixed_costs.hpp"
#include "noise.hpp"
#include "peers.hpp"
#include "pipeline/schedule/chunking.hpp"
#include "replayed_run.hpp"
#include "sluice/core/byte_size.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/host_registration.hpp"
#include "sluice/measure/tuner.hpp"
#include "targets.hpp"

namespace sluice::bench {

using workloads::Problem;

namespace {

CaseBound case_bound(const workloads::AbsoluteBound& b) {
  return {b.rates, b.kernel_ms, b.pinned_volume, b.staged_volume, b.pinned, b.staged};
}

// Runs for a row's fixed costs, apart from its timed runs.
constexpr int overhead_runs = 5;

class CaseRunner {
 public:
  CaseRunner(BenchResult& result, const BenchOptions& options, const std::function<void(const std::string&)>& progress)
      : result_(result), options_(options), progress_(progress) {}

  MeasuredRow measure(std::string method, Problem& problem, const std::function<void()>& run) {
    MeasuredRow row = workloads::measure_row(std::move(method), problem, true, rounds_, run);
    report(row);
    return row;
  }

  static void with_model(MeasuredRow& row, const ModelInput& in) {
    row.model_input = in;
    row.model_ms = predict(in).ms;
  }

  void report(const MeasuredRow& row) {
    if (!progress_) return;
    if (!row.measured()) {
      progress_(fmt::format("{} {} {}: not available: {}", row.workload, format_bytes(row.bytes), row.method, row.unavailable));
      return;
    }
    progress_(fmt::format("{} {} {}: {:.3f} ms (IQR {:.1f}%), {}", row.workload, format_bytes(row.bytes), row.method,
                          row.ms.median, 100 * spread_of(row.samples).relative,
                          row.verified ? "verified" : "NOT VERIFIED: " + row.detail));
  }

  // The fixed costs of a pipeline's runs, where its reports carry them.
  void with_overhead(MeasuredRow& row, Problem& problem, const PipelineOptions& options) {
    row.overhead = workloads::pipeline_overhead(problem, options, overhead_runs);
  }
  void with_overhead(MeasuredRow& row, Problem& problem, workloads::Peer& peer) {
    row.overhead = workloads::peer_overhead(problem, peer, overhead_runs);
  }

  // One recorded run, untimed: where each engine's time went, kept as a trace.
  void record_lanes(const std::string& method, Problem& problem, PipelineOptions options, double bound_ms) {
    keep_trace(workloads::traced_pipeline(title_of(method, problem), problem, options, bound_ms));
  }
  // The same for a peer, so the best hand-written code's timeline sits beside sluice's.
  void record_lanes(const std::string& method, Problem& problem, workloads::Peer& peer, double bound_ms) {
    keep_trace(workloads::traced_run(title_of(method, problem), problem, bound_ms,
                                     [&](TraceRecorder* recorder) { peer.run(problem, recorder); }));
  }
  static std::string title_of(const std::string& method, const Problem& problem) {
    return fmt::format("{} {}: {}", problem.workload().name(), format_bytes(problem.items() * sizeof(float)), method);
  }
  void keep_trace(Trace trace) {
    const std::string& title = trace.title;
    if (progress_) {
      std::string busy;
      for (const auto& lane : analyze(trace).lanes)
        busy += fmt::format(" {} {:.2f} ms,", to_string(lane.lane), lane.busy_ms);
      progress_(fmt::format("  lanes, {}: wall {:.2f} ms; busy:{}", title, trace.wall_ms, busy));
    }
    result_.traces.push_back(std::move(trace));
  }

  // The pinned rows: the peers' sweeps and sluice in rounds, then the
  // settings picked from the sweeps measured again beside sluice.
  std::vector<MeasuredRow> pinned_rows(const BenchCase& c, Problem& pinned, workloads::Peer& sync,
                                       const PipelineOptions& base) {
    const std::size_t items = pinned.items();
    std::vector<workloads::Contender> first_pass;
    first_pass.push_back({"synchronous", &pinned, RowKind::hand_written, [&] { sync.run(pinned); }});
    std::vector<std::unique_ptr<workloads::Peer>> staircases, triples;
    for (unsigned n : options_.staircase_streams) {
      staircases.push_back(workloads::make_staircase(pinned, n));
      workloads::Peer* peer = staircases.back().get();
      first_pass.push_back({peer->name(), &pinned, RowKind::hand_written, [peer, &pinned] { peer->run(pinned); }});
    }
    for (std::size_t chunk_bytes : options_.triple_buffer_chunk_bytes) {
      triples.push_back(workloads::make_triple_buffer(pinned, std::min(items, chunk_bytes / sizeof(float))));
      workloads::Peer* peer = triples.back().get();
      first_pass.push_back({peer->name() + ", " + format_bytes(chunk_bytes) + " chunks", &pinned, RowKind::hand_written,
                            [peer, &pinned] { peer->run(pinned); }});
    }
    Pipeline sluice_pinned = workloads::make_pipeline(pinned, base);
    first_pass.push_back({row_names::pinned, &pinned, RowKind::sluice, [&] { sluice_pinned.run(); }});
    PipelineOptions in_order = base;  // what a kernel with chunk-to-chunk state would need
    in_order.kernel_order = KernelOrder::in_chunk_order;
    in_order.compute_streams = 0;
    Pipeline sluice_in_order = workloads::make_pipeline(pinned, in_order);
    first_pass.push_back(
        {"sluice pinned, kernels in chunk order", &pinned, RowKind::sluice, [&] { sluice_in_order.run(); }});
    const std::vector<MeasuredRow> measured = workloads::measure_in_rounds(first_pass, rounds_);
    for (const auto& row : measured) report(row);

    const std::size_t stairs = staircases.size(), stairs_at = 1, triples_at = 1 + stairs;
    auto fastest_of_sweep = [&](std::size_t first, std::size_t count) {
      std::optional<std::size_t> best;
      for (std::size_t k = first; k < first + count; ++k)
        if (!best || measured[k].ms.median < measured[*best].ms.median) best = k;
      return best;
    };
    const auto best_stairs = fastest_of_sweep(stairs_at, stairs), best_triple = fastest_of_sweep(triples_at, triples.size());
    auto peer_at = [&](std::size_t k) -> workloads::Peer& {
      return k < triples_at ? *staircases[k - stairs_at] : *triples[k - triples_at];
    };

    // The fastest median of a sweep is partly the luckiest one: the settings
    // picked are measured again, in fresh rounds beside sluice's rows, and
    // those figures are the ones kept, so no row gains from being picked.
    // A second pipeline of sluice's own setting runs in the same rounds,
    // apart from the first, so every case shows how far two rows of one
    // engine read apart in one call. Then the replayed row, where the
    // pipeline can replay runs.
    Pipeline sluice_again = workloads::make_pipeline(pinned, base);
    const ReplayedRun replayed = make_replayed_run(pinned, base);
    std::vector<workloads::Contender> finalists;
    if (best_stairs) finalists.push_back(first_pass[*best_stairs]);
    finalists.push_back(first_pass[first_pass.size() - 2]);  // sluice pinned
    if (best_triple) finalists.push_back(first_pass[*best_triple]);
    finalists.push_back(first_pass.back());  // in chunk order
    finalists.push_back({row_names::pinned_again, &pinned, RowKind::sluice, [&] { sluice_again.run(); }});
    finalists.push_back({row_names::replayed, &pinned, RowKind::sluice_replayed, replayed.run});
    const std::vector<MeasuredRow> final_rounds = workloads::measure_in_rounds(finalists, rounds_);
    for (const auto& row : final_rounds) report(row);
    auto final_row = [&](const std::string& method) {
      for (const auto& row : final_rounds)
        if (row.method == method) return row;
      throw std::logic_error("bench: no final row " + method);
    };

    std::vector<MeasuredRow> rows{measured[0]};
    std::optional<std::size_t> four;
    for (std::size_t k = 0; k < stairs; ++k)
      if (options_.staircase_streams[k] == 4) four = stairs_at + k;
    if (four) rows.push_back(four == best_stairs ? final_row(measured[*four].method) : measured[*four]);
    if (best_stairs) {
      if (best_stairs != four) {
        rows.push_back(final_row(measured[*best_stairs].method));
        rows.back().method += " (best of sweep)";
      }
      with_overhead(rows.back(), pinned, peer_at(*best_stairs));
    }
    if (best_triple) {
      record_lanes(measured[*best_triple].method, pinned, peer_at(*best_triple), c.bound.pinned.ms);
      rows.push_back(final_row(measured[*best_triple].method));
      rows.back().method += " (best of sweep)";
      with_overhead(rows.back(), pinned, peer_at(*best_triple));
    }
    rows.push_back(final_row(row_names::pinned));
    with_model(rows.back(), detail::model_input(result_, c, pinned, base, false));
    with_overhead(rows.back(), pinned, base);
    rows.push_back(final_row(row_names::pinned_again));
    rows.push_back(final_row("sluice pinned, kernels in chunk order"));
    with_model(rows.back(), detail::model_input(result_, c, pinned, in_order, false));
    with_overhead(rows.back(), pinned, in_order);
    rows.push_back(final_row(row_names::replayed));
    record_lanes(row_names::pinned, pinned, base, c.bound.pinned.ms);
    return rows;
  }

  // The pageable rows: staging in rounds (with the host alone beside it from
  // 256 MiB), while nothing holds the pageable arrays registered; then the
  // same arrays page-locked by the caller, who holds the registrations (the
  // default policy stages memory it is lent, and never leaves it locked).
  std::vector<MeasuredRow> pageable_rows(BenchCase& c, Problem& pageable, workloads::Peer& sync,
                                         const PipelineOptions& base) {
    PipelineOptions staged = base;
    staged.host_memory = HostMemoryPolicy::stage;
    Pipeline sluice_staged = workloads::make_pipeline(pageable, staged);
    std::vector<workloads::Contender> in_rounds{
        {"synchronous, pageable", &pageable, RowKind::hand_written, [&] { sync.run(pageable); }},
        {row_names::staged, &pageable, RowKind::sluice, [&] { sluice_staged.run(); }}};
    std::optional<StagingPool> pool;
    std::optional<HostAlone> host_alone;
    if (c.bytes >= (std::size_t{256} << 20)) {
      pool.emplace(options_.pipeline.staging_threads);
      host_alone.emplace(pageable, *pool);
      workloads::Contender alone{"host alone, staging both ways", &pageable, RowKind::hand_written,
                                 [&] { host_alone->run(); }};
      alone.checks_result = false;
      in_rounds.push_back(alone);
    }
    std::vector<MeasuredRow> measured = workloads::measure_in_rounds(in_rounds, rounds_);
    for (const auto& row : measured) report(row);
    if (host_alone) {
      c.host_alone = measured.back();
      measured.pop_back();
    }
    std::vector<MeasuredRow> rows{measured[0], measured[1]};
    with_model(rows.back(), detail::model_input(result_, c, pageable, staged, true));
    with_overhead(rows.back(), pageable, staged);
    record_lanes(row_names::staged, pageable, staged, c.bound.staged.ms);
    {
      std::vector<HostRegistration> held;
      for (std::size_t k = 0; k <= pageable.workload().input_count(); ++k) {
        const std::span<float> array = pageable.array(k);
        held.emplace_back(array.data(), array.size_bytes());
      }
      Pipeline sluice_registered = workloads::make_pipeline(pageable, base);
      rows.push_back(measure(row_names::registered, pageable, [&] { sluice_registered.run(); }));
      rows.back().memory = "registered";
      with_model(rows.back(), detail::model_input(result_, c, pageable, base, false));
    }
    return rows;
  }

  void run_case(const workloads::Workload& w, std::size_t bytes) {
    const std::size_t items = bytes / sizeof(float);
    rounds_ = rounds_for(bytes, options_.repeats);
    Problem pinned(w, items, Problem::Memory::pinned);
    std::optional<Problem> pageable;
    if (options_.host_rows) pageable.emplace(w, items, Problem::Memory::pageable);
    StagingPool pool(options_.pipeline.staging_threads);
    BenchCase c{w.name(), bytes,
                case_bound(workloads::absolute_bound(pinned, options_.device, options_.repeats,
                                                     options_.host_rows ? &pool : nullptr, pageable ? &*pageable : nullptr)),
                false, {}};
    const PipelineOptions base = workloads::elementwise(options_.pipeline);
    auto sync = workloads::make_synchronous(pinned);
    std::vector<MeasuredRow> rows = pinned_rows(c, pinned, *sync, base);
    if (pageable) {
      std::vector<MeasuredRow> host = pageable_rows(c, *pageable, *sync, base);
      rows.insert(rows.begin() + 1, host.front());  // the synchronous pageable row beside the pinned one
      rows.insert(rows.end(), host.begin() + 1, host.end());
    }
    for (auto& row : torch_rows_for(w.name(), bytes)) rows.push_back(row);

    const double sync_ms = rows.front().ms.median;
    for (auto& row : rows) {
      if (row.measured()) row.speedup = sync_ms / row.ms.median;  // its bound and efficiency: settle_bounds, at the end
      result_.rows.push_back(row);
    }
    result_.cases.push_back(std::move(c));
  }

  std::vector<MeasuredRow> torch_rows;

 private:
  std::vector<MeasuredRow> torch_rows_for(const std::string& workload, std::size_t bytes) const {
    std::vector<MeasuredRow> out;
    for (const auto& row : torch_rows)
      if (row.workload == workload && row.bytes == bytes) out.push_back(row);
    return out;
  }

  BenchResult& result_;
  const BenchOptions& options_;
  const std::function<void(const std::string&)>& progress_;
  int rounds_ = 1;  // timed rounds for the current case's size
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
    Pipeline p = workloads::make_pipeline(one, workloads::elementwise(options.pipeline));
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
    if (!runner.torch_rows.empty())
      result.notes.push_back("PyTorch's rows come from its own process, run before the cases: they are not in "
                             "sluice's rounds, so a lead over them also carries the noise between processes");
  }
  for (std::size_t bytes : options.sizes)
    for (const auto& w : options.workloads) runner.run_case(w, bytes);
  if (options.file_bytes > 0) detail::run_file_cases(options, result, progress);
  detail::settle_bounds(result);
  return result;
}

}  // namespace sluice::bench
