#include "bench.hpp"

#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <stdexcept>

#include "peers.hpp"
#include "sluice/byte_size.hpp"
#include "sluice/device.hpp"
#include "sluice/error.hpp"

namespace sluice::bench {

Pipeline make_pipeline(Problem& p, const PipelineOptions& options) {
  Pipeline pipeline(options);
  for (std::size_t a = 0; a < p.workload().input_count(); ++a) pipeline.input(p.input(a));
  pipeline.output(p.output());
  const Workload w = p.workload();
  const std::size_t output_span = w.input_count();
  pipeline.compute([w, output_span](const Chunk& chunk) {
    const float* inputs[2] = {chunk.device<const float>(0), output_span > 1 ? chunk.device<const float>(1) : nullptr};
    w.launch(chunk.stream, inputs, chunk.device<float>(output_span), chunk.size());
  });
  return pipeline;
}

BenchRow measure_row(std::string method, Problem& problem, bool sluice, int repeats, const std::function<void()>& run) {
  std::vector<double> samples;
  for (int i = -1; i < repeats; ++i) {  // i == -1 is the warm-up
    problem.poison_output();
    const auto begin = std::chrono::steady_clock::now();
    run();
    SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto end = std::chrono::steady_clock::now();
    if (i >= 0) samples.push_back(std::chrono::duration<double, std::milli>(end - begin).count());
  }
  BenchRow row;
  row.workload = problem.workload().name();
  row.bytes = problem.items() * sizeof(float);
  row.method = std::move(method);
  row.sluice = sluice;
  row.pageable = problem.memory() == Problem::Memory::pageable;
  row.ms = summarize(samples);
  row.gbps = gb_per_s(problem.bytes_moved(), row.ms.median);
  const Verification v = problem.verify();
  row.verified = v.ok;
  row.detail = v.detail;
  return row;
}

Trace traced_run(std::string title, Problem& problem, std::optional<double> bound_ms,
                 const std::function<void(TraceRecorder*)>& run) {
  SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
  problem.poison_output();
  Stream origin;
  TraceRecorder recorder(origin);
  const auto begin = std::chrono::steady_clock::now();
  run(&recorder);
  SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto end = std::chrono::steady_clock::now();
  return Trace{std::move(title), recorder.intervals(), std::chrono::duration<double, std::milli>(end - begin).count(),
               bound_ms};
}

Trace traced_pipeline(std::string title, Problem& problem, PipelineOptions options, std::optional<double> bound_ms) {
  options.record = true;
  problem.poison_output();
  Trace trace = make_trace(std::move(title), make_pipeline(problem, options).run());
  trace.bound_ms = bound_ms;
  return trace;
}

namespace {

class CaseRunner {
 public:
  CaseRunner(BenchResult& result, const BenchOptions& options, const std::function<void(const std::string&)>& progress)
      : result_(result), options_(options), progress_(progress) {}

  BenchRow measure(std::string method, Problem& problem, bool sluice, const std::function<void()>& run) {
    BenchRow row = measure_row(std::move(method), problem, sluice, options_.repeats, run);
    if (progress_)
      progress_(fmt::format("{} {} {}: {:.2f} ms, {}", row.workload, format_bytes(row.bytes), row.method,
                            row.ms.median, row.verified ? "verified" : "NOT VERIFIED: " + row.detail));
    return row;
  }

  // One recorded run, untimed: where each engine's time went, kept as a trace.
  void record_lanes(const std::string& method, Problem& problem, double bound_ms) {
    const std::string title = fmt::format("{} {}: {}", problem.workload().name(),
                                          format_bytes(problem.items() * sizeof(float)), method);
    Trace trace = traced_pipeline(title, problem, options_.pipeline, bound_ms);
    if (progress_) {
      std::string busy;
      for (const auto& lane : analyze(trace).lanes)
        busy += fmt::format(" {} {:.2f} ms,", to_string(lane.lane), lane.busy_ms);
      progress_(fmt::format("  lanes, {}: wall {:.2f} ms; busy:{}", title, trace.wall_ms, busy));
    }
    result_.traces.push_back(std::move(trace));
  }

  void run_case(const Workload& w, std::size_t bytes) {
    const std::size_t items = bytes / sizeof(float);
    Problem pinned(w, items, Problem::Memory::pinned);
    Problem pageable(w, items, Problem::Memory::pageable);
    std::vector<BenchRow> rows;

    Pipeline sluice_pinned = make_pipeline(pinned, options_.pipeline);
    sluice_pinned.run();  // sizes the ring, so the stage costs run on real data
    BenchBound bound{w.name(), bytes, sluice_pinned.measure_stage_costs(options_.repeats), {}};
    bound.bound = compute_bound(bound.costs);

    {
      auto sync = make_synchronous(pinned);
      rows.push_back(measure("synchronous", pinned, false, [&] { sync->run(pinned); }));
      rows.push_back(measure("synchronous, pageable", pageable, false, [&] { sync->run(pageable); }));
    }
    std::optional<BenchRow> best, four;
    for (unsigned n : options_.staircase_streams) {
      auto staircase = make_staircase(pinned, n);
      BenchRow row = measure(staircase->name(), pinned, false, [&] { staircase->run(pinned); });
      if (n == 4) four = row;
      if (!best || row.ms.median < best->ms.median) best = row;
    }
    if (four) rows.push_back(*four);
    if (best && (!four || best->method != four->method)) {
      best->method += " (best of sweep)";
      rows.push_back(*best);
    }
    {
      const std::size_t chunk =
          options_.pipeline.chunk_items > 0 ? options_.pipeline.chunk_items : default_chunk_items(items, sizeof(float));
      auto triple = make_triple_buffer(pinned, chunk);
      rows.push_back(measure(triple->name(), pinned, false, [&] { triple->run(pinned); }));
    }
    rows.push_back(measure("sluice pipeline, pinned", pinned, true, [&] { sluice_pinned.run(); }));
    Pipeline sluice_pageable = make_pipeline(pageable, options_.pipeline);
    rows.push_back(measure("sluice pipeline, pageable std::vector", pageable, true, [&] { sluice_pageable.run(); }));
    record_lanes("sluice pipeline, pinned", pinned, bound.bound.ms);
    record_lanes("sluice pipeline, pageable", pageable, bound.bound.ms);

    const double sync_ms = rows.front().ms.median;
    for (auto& row : rows) {
      row.speedup = sync_ms / row.ms.median;
      row.efficiency = efficiency(bound.bound.ms, row.ms.median);
      result_.rows.push_back(row);
    }
    result_.bounds.push_back(bound);
  }

 private:
  BenchResult& result_;
  const BenchOptions& options_;
  const std::function<void(const std::string&)>& progress_;
};

}  // namespace

BenchResult run_bench(const BenchOptions& options, const std::function<void(const std::string&)>& progress) {
  if (options.workloads.empty()) throw std::invalid_argument("bench: no workloads");
  if (options.sizes.empty()) throw std::invalid_argument("bench: no sizes");
  if (options.repeats < 1) throw std::invalid_argument("bench: repeats must be at least 1");
  for (std::size_t bytes : options.sizes)
    if (bytes < sizeof(float)) throw std::invalid_argument("bench: size " + std::to_string(bytes) + " is below one item");
  Device device(options.device);
  device.make_current();
  BenchResult result;
  result.device = device.info();
  result.repeats = options.repeats;
  CaseRunner runner(result, options, progress);
  for (std::size_t bytes : options.sizes)
    for (const auto& w : options.workloads) runner.run_case(w, bytes);
  return result;
}

}  // namespace sluice::bench
