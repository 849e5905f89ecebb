#include "measure.hpp"

#include <chrono>

#include "sluice/error.hpp"
#include "sluice/stream.hpp"

namespace sluice::workloads {

WorkloadPipeline make_workload_pipeline(Problem& p, const PipelineOptions& options) {
  WorkloadPipeline wp{Pipeline(options), {}, {}, {}, p.workload().input_count()};
  const Workload w = p.workload();
  wp.a = wp.pipeline.input(p.input(0));
  wp.b = w.input_count() > 1 ? wp.pipeline.input(p.input(1)) : wp.a;
  wp.out = wp.pipeline.output(p.output());
  wp.pipeline.compute([w, a = wp.a, b = wp.b, out = wp.out](const Chunk& chunk) {
    const float* inputs[2] = {chunk[a].data(), chunk[b].data()};
    w.launch(chunk.stream, inputs, chunk[out].data(), chunk.size());
  });
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

double timed_run_ms(Problem& problem, const std::function<void()>& run) {
  problem.poison_output();
  const auto begin = std::chrono::steady_clock::now();
  run();
  SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
}

MeasuredRow row_of(std::string method, Problem& problem, bool sluice, const std::vector<double>& samples) {
  MeasuredRow row;
  row.workload = problem.workload().name();
  row.bytes = problem.items() * sizeof(float);
  row.method = std::move(method);
  row.sluice = sluice;
  row.memory = problem.memory() == Problem::Memory::pinned ? "pinned" : "pageable";
  row.ms = summarize(samples);
  row.gbps = gb_per_s(problem.bytes_moved(), row.ms.median);
  const Verification v = problem.verify();
  row.verified = v.ok;
  row.detail = v.detail;
  return row;
}

}  // namespace

MeasuredRow measure_row(std::string method, Problem& problem, bool sluice, int repeats, const std::function<void()>& run) {
  return measure_in_rounds({{std::move(method), &problem, sluice, run, {}, {}}}, repeats).front();
}

std::vector<MeasuredRow> measure_in_rounds(const std::vector<Contender>& contenders, int repeats) {
  std::vector<std::vector<double>> samples(contenders.size());
  std::vector<MeasuredRow> rows(contenders.size());
  for (int round = -1; round < repeats; ++round) {  // round -1 is the warm-up
    for (std::size_t k = 0; k < contenders.size(); ++k) {
      const Contender& c = contenders[k];
      if (c.before) c.before();
      const double ms = timed_run_ms(*c.problem, c.run);
      if (round >= 0) samples[k].push_back(ms);
      if (round + 1 == repeats) rows[k] = row_of(c.method, *c.problem, c.sluice, samples[k]);
      if (c.after) c.after();
    }
  }
  return rows;
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

}  // namespace sluice::workloads
