#pragma once
// Measure and verify, the way every figure sluice prints is made: outputs
// poisoned first, a warm-up run, the median of timed runs (each ending with
// the output in host memory), the last run's output checked against the CPU
// reference. Shared by the demos and the bench.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sluice/model.hpp"
#include "sluice/pipeline.hpp"
#include "sluice/stats.hpp"
#include "sluice/trace.hpp"
#include "sluice/trace_recorder.hpp"
#include "workload.hpp"

namespace sluice::workloads {

struct MeasuredRow {
  std::string workload;
  std::size_t bytes = 0;  // per array
  std::string method;
  bool sluice = false;     // a sluice pipeline row, as opposed to a peer
  std::string memory;      // "pinned", "pageable", "registered", "file", ...
  Summary ms;
  double gbps = 0;         // bytes in + out over the median time
  double speedup = 0;      // synchronous (pinned) median over this median
  double bound_ms = 0;     // the absolute bound this row is judged by
  std::string bound_term;  // the engine that sets it
  double efficiency = 0;   // bound over this median
  std::optional<double> model_ms;  // the model's prediction, for sluice rows
  std::optional<ModelInput> model_input;  // what it was made from
  bool verified = false;
  std::string detail;      // why verification failed
};

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
WorkloadPipeline make_workload_pipeline(Problem& problem, const PipelineOptions& options);

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
  bool sluice = false;
  std::function<void()> run;
  std::function<void()> before;  // untimed, before each run (optional)
  std::function<void()> after;   // untimed, after each run and its check (optional)
};

// Every contender once per round: a warm-up round, then `repeats` timed
// rounds. Drift in the machine (clocks, host memory, other load) then
// reaches every row alike instead of whichever ran while it lasted, which
// matters when rows a few percent apart are compared. Outputs are poisoned
// before every run; each contender's output is checked after its last run.
std::vector<MeasuredRow> measure_in_rounds(const std::vector<Contender>& contenders, int repeats);

// One untimed run of `run` with a recorder: its timeline, titled, with the
// host-measured wall time and the bound beside it.
Trace traced_run(std::string title, Problem& problem, std::optional<double> bound_ms,
                 const std::function<void(TraceRecorder*)>& run);
// One recorded, untimed run of a pipeline over `problem`.
Trace traced_pipeline(std::string title, Problem& problem, PipelineOptions options, std::optional<double> bound_ms);

}  // namespace sluice::workloads
