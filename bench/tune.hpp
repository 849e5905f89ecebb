#pragma once
// `sluice tune`: the pipeline's defaults against a measured sweep of chunk
// sizes, ramps and depths, with the model's pick beside them, every run
// verified. Shows the gap between the defaults and the best setting.
#include <functional>
#include <string>
#include <vector>

#include "tune_result.hpp"
#include "workload.hpp"

namespace sluice::bench {

struct TuneOptions {
  int device = 0;
  std::vector<workloads::Workload> workloads;
  std::vector<std::size_t> sizes;
  int repeats = 3;  // timed runs of each setting in the sweep
  // Timed rounds of the final comparison, as `sluice bench --repeat` (the
  // same default): the defaults are measured as the bench measures "sluice
  // pinned", so the two tools' figures for them can be set side by side.
  int final_repeats = 5;
  bool pageable = false;  // sweep pageable (staged) spans instead of pinned
  // Sweep replayed pipelines (Replay::graph): captured once, then launched
  // as one graph, with no host work per chunk. The model plays run(), not a
  // replay, so a replayed sweep has no model column.
  bool replayed = false;
};

std::vector<TuneCase> run_tune(const TuneOptions& options, const std::function<void(const std::string&)>& progress);

}  // namespace sluice::bench
