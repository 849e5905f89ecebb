#include "measure.hpp"

#include <chrono>

#include "peers.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/stream.hpp"

namespace sluice::workloads {

WorkloadPipeline make_workload_pipeline(Problem& p, const PipelineOptions& options, Replay replay) {
  WorkloadPipeline wp{Pipeline(options), {}, {}, {}, p.workload().input_count()};
  const Workload w = p.workload();
  wp.a = wp.pipeline.input(p.input(0));
  wp.b = w.input_count() > 1 ? wp.pipeline.input(p.input(1)) : wp.a;
  wp.out = wp.pipeline.output(p.output());
  wp.pipeline.compute([w, a = wp.a, b = wp.b, out = wp.out](const Chunk& chunk) {
    const float* inputs[2] = {chunk[a].data(), chunk[b].data()};
    w.launch(chunk.stream, inputs, chunk[out].data(), chunk.size());
  }, replay);
  return wp;
}

void WorkloadPipeline::bind(Problem& p) {
  pipeline.rebind(a, p.input(0));
  if (inputs > 1) pipeline.rebind(b, p.input(1));
  pipeline.rebind(out, p.output());
}

Pipeline make_pipeline(Problem& p, const PipelineOptions& options) {
  return std::move(make_workload_pipeline(p, options).pipeline);
}

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

double timed_run_ms(Problem& problem, const std::function<void()>& run) {
  problem.poison_output();
  const auto begin = Clock::now();
  run();
  SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
  return ms_between(begin, Clock::now());
}

MeasuredRow row_of(const Contender& c, std::vector<double> samples) {
  Problem& problem = *c.problem;
  MeasuredRow row;
  row.workload = problem.workload().name();
  row.bytes = problem.items() * sizeof(float);
  row.method = c.method;
  row.kind = c.kind;
  row.memory = problem.memory() == Problem::Memory::pinned ? "pinned" : "pageable";
  row.ms = summarize(samples);
  row.samples = std::move(samples);
  row.gbps = gb_per_s(problem.bytes_moved(), row.ms.median);
  if (!c.checks_result) {
    row.detail = "no result to check: host copies only";
    return row;
  }
  const Verification v = problem.verify();
  row.verified = v.ok;
  row.detail = v.detail;
  return row;
}

}  // namespace

MeasuredRow measure_row(std::string method, Problem& problem, bool sluice, int repeats, const std::function<void()>& run) {
  const Contender c{std::move(method), &problem, sluice ? RowKind::sluice : RowKind::hand_written, run};
  return measure_in_rounds({c}, repeats).front();
}

std::vector<MeasuredRow> measure_in_rounds(const std::vector<Contender>& contenders, int repeats) {
  std::vector<std::vector<double>> samples(contenders.size());
  std::vector<MeasuredRow> rows(contenders.size());
  for (int round = -1; round < repeats; ++round) {  // round -1 is the warm-up
    for (std::size_t k = 0; k < contenders.size(); ++k) {
      const Contender& c = contenders[k];
      const double ms = timed_run_ms(*c.problem, c.run);
      if (round >= 0) samples[k].push_back(ms);
      if (round + 1 == repeats) rows[k] = row_of(c, std::move(samples[k]));
    }
  }
  return rows;
}

std::optional<RunReport::Overhead> pipeline_overhead(Problem& problem, PipelineOptions options, int runs) {
  // Timed stage by stage, but not recorded: recording waits for the run's
  // origin to align the clocks, which would add to the cost measured.
  options.report_bound = true;
  Pipeline p = make_pipeline(problem, options);
  std::vector<RunReport::Overhead> costs;
  for (int k = -1; k < runs; ++k) {
    problem.poison_output();
    const RunReport report = p.run();
    if (k >= 0 && filled(report.overhead)) costs.push_back(report.overhead);
  }
  return median_overhead(costs);
}

std::optional<RunReport::Overhead> peer_overhead(Problem& problem, Peer& peer, int runs) {
  std::vector<RunReport::Overhead> costs;
  Stream origin;
  for (int k = -1; k < runs; ++k) {
    SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
    problem.poison_output();
    TraceRecorder recorder(origin);
    const auto zero = Clock::now();  // the origin event was recorded just before, on an idle stream
    const auto call = Clock::now();
    peer.run(problem, &recorder);
    const auto returned = Clock::now();
    const auto intervals = recorder.intervals();
    const HostMarks marks{ms_between(zero, call), ms_between(zero, peer.enqueued()), ms_between(zero, returned)};
    if (const auto o = overhead_of(intervals, marks); k >= 0 && o) costs.push_back(*o);
  }
  return median_overhead(costs);
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
  Pipeline pipeline = make_pipeline(problem, options);
  // The timeline is of a run after the first, which may learn its chunks
  // (adapt_chunks): the chunks the measured rows ran.
  pipeline.run();
  problem.poison_output();
  Trace trace = make_trace(std::move(title), pipeline.run());
  trace.bound_ms = bound_ms;
  return trace;
}

}  // namespace sluice::workloads
