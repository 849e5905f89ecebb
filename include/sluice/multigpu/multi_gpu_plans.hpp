#pragma once
// What scheduling work over several GPUs decides before any GPU runs. Host-only.
//
//   pipeline_schedule  the order of forward and backward passes of M
//                      micro-batches on each of S pipeline stages: GPipe (all
//                      forwards, then all backwards) or 1F1B (after a warm-up
//                      of S - s forwards on stage s, one forward and one
//                      backward in turn, so that a stage holds at most S - s
//                      micro-batches' activations)
//   plan_buckets       gradients grouped into buckets for all-reduce, in the
//                      order backward produces them
//   deal_items         a range of items split between GPUs in proportion to
//                      their measured speed
#include <cstddef>
#include <vector>

#include "sluice/pipeline/chunk_plan.hpp"

namespace sluice {

enum class PipelineScheduleKind { gpipe, one_f_one_b };

struct StageStep {
  bool forward = true;
  std::size_t micro = 0;
  friend bool operator==(const StageStep&, const StageStep&) = default;
};

// steps[s]: stage s's steps, in the order it runs them. Throws
// std::invalid_argument for no stage or no micro-batch.
std::vector<std::vector<StageStep>> pipeline_schedule(PipelineScheduleKind kind, std::size_t stages, std::size_t micros);

struct ScheduledStep {
  std::size_t stage = 0;
  StageStep step;
};

// Every stage's steps merged into one order in which a single thread can
// enqueue them: each step after the step it takes its input from (a stream
// can only wait for an event already recorded). Stage order is kept. Throws
// std::logic_error for a schedule that can never finish.
std::vector<ScheduledStep> issue_order(const std::vector<std::vector<StageStep>>& steps);

struct ScheduleTiming {
  double makespan = 0;        // from the first forward to the last backward, in cost units
  double bubble_fraction = 0; // idle share of stage-time: 1 - busy / (stages x makespan)
};

// Plays a schedule with every forward costing `forward`, every backward
// `backward`, and a hand-off between stages costing `hop`: a step starts when
// its stage is free and its input (the previous stage's forward, the next
// stage's backward) has arrived. Throws std::logic_error for a schedule that
// can never finish (a step waiting on one that comes after it).
ScheduleTiming time_schedule(const std::vector<std::vector<StageStep>>& steps, double forward, double backward, double hop);

// The textbook bubble of a synchronous pipeline schedule: (S - 1) / (M + S - 1).
constexpr double ideal_bubble(std::size_t stages, std::size_t micros) {
  return stages + micros > 1 ? static_cast<double>(stages - 1) / static_cast<double>(micros + stages - 1) : 0.0;
}

struct Bucket {
  std::size_t first = 0;  // index into the gradients, in backward order
  std::size_t count = 0;
  std::size_t bytes = 0;
};

// Consecutive gradients (in the order backward produces them) fill a bucket
// until it reaches `bucket_bytes`; a gradient larger than that is a bucket of
// its own. Every gradient lands in exactly one bucket, order kept.
std::vector<Bucket> plan_buckets(const std::vector<std::size_t>& gradient_bytes, std::size_t bucket_bytes);

struct ItemShare {
  std::size_t device_slot = 0;  // which of the weights
  ItemRange items;
};

// Splits [0, items) into one contiguous range per weight, in proportion to
// the weights (a GPU twice as fast gets twice the items), with sizes rounded
// to `granule` items except the last. Every item exactly once; ranges in
// order; a weight of zero gets an empty range. Throws std::invalid_argument
// for no weights or none positive.
std::vector<ItemShare> deal_items(std::size_t items, const std::vector<double>& weights, std::size_t granule = 1);

}  // namespace sluice
