#pragma once
// `sluice bench`: sluice's pipeline beside the hand-written peers, on the same
// data, every row verified, with the bound measured in the same run.
#include <functional>
#include <string>
#include <vector>

#include "bench_result.hpp"
#include "sluice/pipeline.hpp"
#include "sluice/trace_recorder.hpp"
#include "workload.hpp"

namespace sluice::bench {

struct BenchOptions {
  int device = 0;
  std::vector<Workload> workloads;
  std::vector<std::size_t> sizes;        // bytes per array
  int repeats = 5;
  std::vector<unsigned> staircase_streams{2, 3, 4, 6, 8, 12, 16};
  PipelineOptions pipeline;              // chunk, depth, staging threads for the sluice rows
};

// sluice's pipeline over a problem: its inputs, one output, the workload's kernel.
Pipeline make_pipeline(Problem& problem, const PipelineOptions& options);

// Poison the output, run, synchronise: one warm-up, then `repeats` runs timed
// on a steady clock (each ends with the output in host memory); verify the last.
BenchRow measure_row(std::string method, Problem& problem, bool sluice, int repeats, const std::function<void()>& run);

// One untimed run of `run` with a recorder: its timeline, titled, with the
// host-measured wall time and the bound beside it.
Trace traced_run(std::string title, Problem& problem, std::optional<double> bound_ms,
                 const std::function<void(TraceRecorder*)>& run);
// One recorded, untimed run of a pipeline over `problem`.
Trace traced_pipeline(std::string title, Problem& problem, PipelineOptions options, std::optional<double> bound_ms);

// progress(line) is called as each row finishes, for a live log.
BenchResult run_bench(const BenchOptions& options, const std::function<void(const std::string&)>& progress = {});

}  // namespace sluice::bench
