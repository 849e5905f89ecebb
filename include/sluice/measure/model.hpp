#pragma once
// A model of a pipeline run: predicts its time and timeline from the
// engines' measured rates and fixed costs, the kernel's cost per item and
// the configuration, with no GPU (a saved `sluice probe --json` is enough).
// Host-only.
//
// It plays the run's own schedule (schedule.hpp) through those rates: the
// driver submits the device operations one after another at its measured
// cost per operation, waiting where the schedule makes the host wait; each
// operation starts once what it waits on has finished, its lane is free and
// it has been submitted. Engines that run at once share what they share:
// H2D and D2H split the both-directions link rate, stage-in and stage-out
// split the host's both-directions copy rate. The rules live in the
// schedule alone, so the model cannot drift from what the pipeline does.
#include <cstddef>
#include <string>
#include <vector>

#include "sluice/bound/bound.hpp"
#include "sluice/pipeline/chunk_plan.hpp"
#include "sluice/pipeline/pipeline_options.hpp"
#include "sluice/pipeline/schedule.hpp"
#include "sluice/trace/stage_interval.hpp"

namespace sluice {

// Fixed costs, in milliseconds, from `sluice probe`.
struct FixedCosts {
  double copy_ms = 0.004;    // a copy's latency beyond its bytes (from small pinned copies)
  double launch_ms = 0.004;  // a kernel launch, submit to start
  double wake_ms = 0.05;     // a host thread woken by a blocking event wait
  double chunk_ms = 0.01;    // the host's work to enqueue one chunk
  double run_ms = 0.05;      // a run's own start and end (RunReport::overhead of a run of one tiny chunk)
  double stage_ms = 0.03;    // a job handed to the staging threads and back, beyond its bytes
};

struct KernelCost {
  double ms_per_item = 0;  // the kernel alone over many items, per item
  double fixed_ms = 0;     // per launch, beyond the launch cost
};

struct ModelInput {
  EngineRates rates;
  FixedCosts fixed;
  KernelCost kernel;
  // The run: its spans (item sizes, and which pass through the host), its
  // items and the options that cut them; the schedule is planned from them.
  std::vector<SpanShape> spans;
  std::size_t items = 0;
  PipelineOptions options;
};

// `inputs` input and `outputs` output arrays of `item_bytes`-byte items,
// staged (pageable) or copied directly (pinned).
std::vector<SpanShape> array_spans(unsigned inputs, unsigned outputs, std::size_t item_bytes, bool staged);

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

// The schedule a pipeline with `input`'s options runs, as it runs once it
// has learnt its kernels (PipelineOptions::adapt_chunks): whether they take
// longer than the copies is judged at the model's rates.
Schedule schedule_of(const ModelInput& input);

// Throws std::invalid_argument for rates that are zero where the run needs them.
Prediction predict(const ModelInput& input);
Prediction predict(const Schedule& schedule, const EngineRates& rates, const FixedCosts& fixed, const KernelCost& kernel);

// A copy's latency and rate from two measured sizes (bytes, ms): t = latency + bytes / rate.
struct LatencyRate {
  double latency_ms = 0;
  double gbps = 0;
};
LatencyRate fit_latency_rate(double small_bytes, double small_ms, double large_bytes, double large_ms);

}  // namespace sluice
