#include "replayed_run.hpp"

#include "measure.hpp"

namespace sluice::bench {

// The workload's pipeline, its run captured once and replayed: the arrays
// are pinned, so every byte moves by the copy engines.
ReplayedRun make_replayed_run(workloads::Problem& problem, const PipelineOptions& options) {
  auto pipeline = std::make_shared<workloads::WorkloadPipeline>(
      workloads::make_workload_pipeline(problem, options, Replay::graph));
  // The captures, untimed: what a service pays once. The first run is
  // captured with timing marks to learn its chunks (adapt_chunks), the
  // second again without them.
  for (int capture = 0; capture < 2; ++capture) pipeline->run();
  return {[pipeline] { pipeline->run(); }, pipeline};
}

}  // namespace sluice::bench
