#include "replayed_run.hpp"

namespace sluice::bench {

ReplayedRun make_replayed_run(workloads::Problem&, const PipelineOptions&) {
  return {"the pipeline cannot replay runs yet (replayed_run.cpp)", {}, {}};
}

}  // namespace sluice::bench
