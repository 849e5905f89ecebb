#pragma once
// Which items (token windows, records) each batch of each epoch holds, for
// one rank of a data-parallel job. Host-only.
//
// The order is global: an epoch visits every item once, in order or in a
// seeded shuffle that is different each epoch, and is cut into global
// batches of `batch x world` consecutive positions. Rank r reads its slice
// of each global batch, positions [r batch, (r + 1) batch). So the order
// depends on the seed, the epoch and the global batch alone, not on how many
// ranks share it: a state saved by 4 ranks of 6 rows resumes on 2 ranks of
// 12 or 3 of 8 at the same place, with the same global batches.
//
// The epoch's tail, the last global batch when the items do not fill it:
//   drop_last           dropped (every rank serves the same full batches)
//   world > 1           padded with the epoch's first positions, so that every
//                       rank serves the same number of full batches (a
//                       data-parallel job's collectives would otherwise wait for
//                       ever); as PyTorch's DistributedSampler pads
//   world 1             served short
//
// The shuffle is a keyed bijection computed on demand (a Feistel network
// with cycle-walking), not a stored permutation: memory does not grow with
// the data, and any batch of any epoch can be found at once, which is what
// resuming from a saved state needs.
#include <cstddef>
#include <cstdint>

namespace sluice {

struct BatchPlanOptions {
  std::size_t batch = 1;  // items per batch, on each rank
  bool shuffle = false;
  std::uint64_t seed = 0;
  std::size_t rank = 0;
  std::size_t world = 1;
  bool drop_last = false;  // see the tail above
};

// Where a job is in its data: the epoch, and the position in that epoch's
// global order of the next global batch's first item. Every rank of a job
// holds the same state. Saved and restored, it resumes the identical
// sequence of global batches on any number of ranks that keeps the global
// batch; with another global batch, the same items follow (those the epoch
// has not served yet, each once), cut into the new global batches.
struct LoaderState {
  std::uint64_t epoch = 0;
  std::size_t sample = 0;
  friend bool operator==(const LoaderState&, const LoaderState&) = default;
};

class BatchPlan {
 public:
  // Throws std::invalid_argument for a batch of 0, a world of 0, a rank
  // outside it, or a global batch (batch x world) larger than the items.
  BatchPlan(std::size_t items, BatchPlanOptions options);

  std::size_t items() const { return items_; }
  const BatchPlanOptions& options() const { return options_; }
  std::size_t global_batch() const { return options_.batch * options_.world; }
  // Batches each rank serves in an epoch from its start.
  std::size_t batches_per_epoch() const { return batches_left({0, 0}); }
  // Batches from `state` to the end of its epoch.
  std::size_t batches_left(LoaderState state) const;
  // Where a saved state resumes under this plan: the state itself, or the
  // next epoch's start when no batch of this plan starts there (a state saved
  // with another global batch, in the tail this plan drops). Throws
  // std::invalid_argument for a position past the epoch's items.
  LoaderState resume_at(LoaderState state) const;
  // Rows of this rank's batch at `state`: `batch`, or fewer for a short tail.
  std::size_t batch_rows(LoaderState state) const;
  // The item in row `row` of this rank's batch at `state`.
  std::size_t item(LoaderState state, std::size_t row) const;
  // The item at `position` of the epoch's order (all ranks together).
  std::size_t permuted(std::uint64_t epoch, std::size_t position) const;
  // The state after serving the batch at `state`.
  LoaderState next(LoaderState state) const;
  bool last_of_epoch(LoaderState state) const { return batches_left(state) == 1; }

 private:
  bool pads() const { return !options_.drop_last && options_.world > 1; }
  void check(LoaderState state) const;

  std::size_t items_;
  BatchPlanOptions options_;
  unsigned half_bits_ = 1;
};

}  // namespace sluice
