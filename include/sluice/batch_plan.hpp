#pragma once
// Which items (token windows, records) each batch of each epoch holds, for
// one rank of a data-parallel job. Host-only.
//
// An epoch visits every item once, in order or in a seeded shuffle that is
// different each epoch. Rank r of `world` takes the epoch's positions r,
// r + world, r + 2 world, ...: ranks are disjoint and together cover every
// item. Batches take `batch` consecutive positions of the rank's share.
//
// The shuffle is a keyed bijection computed on demand (a Feistel network
// with cycle-walking), not a stored permutation: memory does not grow with
// the data, and any batch of any epoch can be found at once, which is what
// resuming from a saved state needs.
#include <cstddef>
#include <cstdint>

namespace sluice {

struct BatchPlanOptions {
  std::size_t batch = 1;     // items per batch
  bool shuffle = false;
  std::uint64_t seed = 0;
  std::size_t rank = 0;
  std::size_t world = 1;
  // false: every item of the epoch is served once; the last batch of a rank
  // may be short, and ranks may differ by one batch. true: every rank serves
  // the same number of full batches (what data-parallel training needs),
  // leaving out at most world * batch - 1 items per epoch.
  bool drop_last = false;
};

// Where a loader is: the next batch it will serve. Saved and restored, it
// resumes the identical sequence of batches.
struct LoaderState {
  std::uint64_t epoch = 0;
  std::size_t batch = 0;
  friend bool operator==(const LoaderState&, const LoaderState&) = default;
};

class BatchPlan {
 public:
  // Throws std::invalid_argument for a batch of 0, a world of 0, a rank
  // outside it, or fewer items than one batch per rank needs.
  BatchPlan(std::size_t items, BatchPlanOptions options);

  std::size_t items() const { return items_; }
  const BatchPlanOptions& options() const { return options_; }
  // Items this rank serves per epoch, and in how many batches.
  std::size_t rank_items() const { return rank_items_; }
  std::size_t batches_per_epoch() const { return (rank_items_ + options_.batch - 1) / options_.batch; }
  // Rows of batch b: `batch`, or fewer for a short last batch.
  std::size_t batch_rows(std::size_t b) const;
  // The item in row `row` of batch `b` of `epoch`, for this rank.
  std::size_t item(std::uint64_t epoch, std::size_t b, std::size_t row) const;
  // The item at `position` of the epoch's order (all ranks together).
  std::size_t permuted(std::uint64_t epoch, std::size_t position) const;
  // The state after serving the batch at `state`.
  LoaderState next(LoaderState state) const;

 private:
  std::size_t items_;
  BatchPlanOptions options_;
  std::size_t rank_items_ = 0;
  unsigned half_bits_ = 1;
};

}  // namespace sluice
