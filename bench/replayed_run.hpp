#pragma once
// Replayed runs: a pipeline's run captured once as a CUDA graph and then
// replayed, so a run's fixed costs are paid at capture, not at every run.
// The bench measures them beside "sluice pinned" (row kind
// RowKind::sluice_replayed, named row_names::replayed) at every size, and
// the targets hold them to being faster than run() at 4-64 MiB and a 4 MiB
// copy to 0.55 of its bound.
//
// make_replayed_run() builds the replaying pipeline (its captures not timed:
// the first run's, and the second's where the first learnt its chunks) and
// returns how to run it once.
#include <functional>
#include <memory>
#include <string>

#include "sluice/pipeline/pipeline_options.hpp"
#include "workload.hpp"

namespace sluice::bench {

struct ReplayedRun {
  std::function<void()> run;   // one replayed run, returning with the output in host memory
  std::shared_ptr<void> keep;  // what `run` needs alive
};

ReplayedRun make_replayed_run(workloads::Problem& problem, const PipelineOptions& options);

}  // namespace sluice::bench
