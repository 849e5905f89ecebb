#pragma once
// A model of a pipeline run: predicts its time and timeline from the
// engines' measured rates and fixed costs, the kernel's cost per item and
// the configuration, with no GPU (a saved `sluice probe --json` is enough).
// Host-only.
//
// It plays the run out chunk by chunk as the pipeline schedules it: host
// stage-in a few chunks ahead, H2D in order behind its slot's previous D2H,
// compute in order, D2H in order, stage-out in order. Engines that run at
// once share what they share: H2D and D2H split the both-directions link
// rate, stage-in and stage-out split the host's both-directions copy rate.
#include <cstddef>
#include <string>
#include <vector>

#include "sluice/bound.hpp"
#include "sluice/chunk_plan.hpp"
#include "sluice/stage_interval.hpp"

namespace sluice {

// Fixed costs, in milliseconds, from `sluice probe`.
struct FixedCosts {
  double copy_ms = 0.004;    // a copy's latency beyond its bytes (from small pinned copies)
  double launch_ms = 0.004;  // a kernel launch, submit to start
  double wake_ms = 0.05;     // a host thread woken by a blocking event wait
  double chunk_ms = 0.01;    // the host's work to enqueue one chunk
  double run_ms = 0.05;      // a run's own start and end
};

struct KernelCost {
  double ms_per_item = 0;  // the kernel alone over many items, per item
  double fixed_ms = 0;     // per launch, beyond the launch cost
};

struct ModelInput {
  EngineRates rates;
  FixedCosts fixed;
  KernelCost kernel;
  ChunkPlan plan{0, 1};
  std::size_t depth = 4;
  std::size_t in_slots = 3;   // pinned stage-in slots
  std::size_t out_slots = 5;  // pinned stage-out slots
  std::size_t in_item_bytes = 0;   // bytes per item copied in, all input spans together
  std::size_t out_item_bytes = 0;  // bytes per item copied out
  bool staged_in = false;          // inputs pass through host staging
  bool staged_out = false;
};

struct Prediction {
  double ms = 0;
  std::vector<StageInterval> timeline;  // lanes as in a recorded run
  // The lane busy longest: what the run waited on most.
  std::string busiest;
};

// The staging rates a staged run sees: the host's rates alone, slowed to
// what host memory serves beside the run's own copies (host_memory_ms in
// bound.hpp). `rates` unchanged when that term is unknown or no slower.
EngineRates staging_beside_copies(const RunVolume& volume, const EngineRates& rates);

// Throws std::invalid_argument for rates that are zero where the run needs them.
Prediction predict(const ModelInput& input);

// A copy's latency and rate from two measured sizes (bytes, ms): t = latency + bytes / rate.
struct LatencyRate {
  double latency_ms = 0;
  double gbps = 0;
};
LatencyRate fit_latency_rate(double small_bytes, double small_ms, double large_bytes, double large_ms);

}  // namespace sluice
