#pragma once
// Measure and verify, the way every figure sluice prints is made: outputs
// poisoned first, a warm-up run, the median of timed runs (each ending with
// the output in host memory), the last run's output checked against the CPU
// reference. Shared by the demos, the bench and the tuner: a setting that
// both the bench and the tuner measure goes through measure_in_rounds in
// both, with the same rounds, warm-up, poisoning and clock.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "measured_row.hpp"
#include "run_overhead.hpp"
#include "sluice/pipeline/pipeline.hpp"
#include "sluice/trace/trace.hpp"
#include "sluice/trace/trace_recorder.hpp"
#include "workload.hpp"

namespace sluice::workloads {

// The workload as a pipeline over a problem's arrays, keeping its handles so
// the same pipeline can be pointed at another problem of the same shape.
struct WorkloadPipeline {
  Pipeline pipeline;
  SpanHandle<const float> a, b;  // b == a for one input
  SpanHandle<float> out;
  std::size_t inputs = 1;
  // Points the spans at `problem`'s arrays (Pipeline::rebind): its registrations, if any, are undone.
  void bind(Problem& problem);
  RunReport run() { return pipeline.run(); }
};
WorkloadPipeline make_workload_pipeline(Problem& problem, const PipelineOptions& options,
                                        Replay replay = Replay::none);

// Every workload here computes each output item from the same items of its
// inputs alone, so its kernels may overlap across chunks; what a caller
// would state for such a kernel.
inline PipelineOptions elementwise(PipelineOptions options) {
  options.kernel_order = KernelOrder::independent;
  return options;
}

// The same, when the handles are not needed.
Pipeline make_pipeline(Problem& problem, const PipelineOptions& options);

// Poison, run, and time `repeats` runs after one warm-up; verify the last.
MeasuredRow measure_row(std::string method, Problem& problem, bool sluice, int repeats, const std::function<void()>& run);

// One method in a comparison, and how to run it once.
struct Contender {
  std::string method;
  Problem* problem = nullptr;
  RowKind kind = RowKind::hand_written;
  std::function<void()> run;
  // False for a measurement that makes no result (host copies alone): its
  // row says so instead of being checked against the reference.
  bool checks_result = true;
};

// Every contender once per round: one untimed round, then `repeats` timed
// rounds. Drift in the machine (clocks, host memory, other load) then
// reaches every row alike instead of whichever ran while it lasted, which
// matters when rows a few percent apart are compared. Outputs are poisoned
// before every run (the poison is not timed); each contender's output is
// checked after its last run. Every run is timed by the host clock from the
// call to the device being idle again, with no timing events in the run.
std::vector<MeasuredRow> measure_in_rounds(const std::vector<Contender>& contenders, int repeats);

class Peer;
// A run's fixed costs, the median of `runs` runs after a warm-up, each with
// its output poisoned first as in the timed runs; measured apart from them,
// because timing a run's stages adds events to it.
// A pipeline's, as its own reports give them (PipelineOptions::record):
// unset where the engine leaves them 0.
std::optional<RunReport::Overhead> pipeline_overhead(Problem& problem, PipelineOptions options, int runs);
// A hand-written peer's, from recorded runs (run_overhead.hpp).
std::optional<RunReport::Overhead> peer_overhead(Problem& problem, Peer& peer, int runs);

// One untimed run of `run` with a recorder: its timeline, titled, with the
// host-measured wall time and the bound beside it.
Trace traced_run(std::string title, Problem& problem, std::optional<double> bound_ms,
                 const std::function<void(TraceRecorder*)>& run);
// One recorded, untimed run of a pipeline over `problem`.
Trace traced_pipeline(std::string title, Problem& problem, PipelineOptions options, std::optional<double> bound_ms);

}  // namespace sluice::workloads
