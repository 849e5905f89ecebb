#pragma once
// How a run of `item_count` items is cut into chunks. Host-only.
//
// A uniform plan cuts chunks of `chunk_items` (the last may be shorter). A
// ramped plan starts and ends with small chunks that double up to
// `chunk_items` and halve back down:
//
//     f, 2f, 4f, ..., c, c, ..., c, ..., 4f, 2f, f
//
// The pipeline cannot start a kernel before the first chunk's copy in, nor
// finish before the last chunk's copy out: those two copies are its fill and
// drain. Small chunks at both ends make them short, while the large chunks in
// the middle keep the per-chunk fixed costs low.
#include <cstddef>
#include <vector>

namespace sluice {

struct ItemRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  constexpr std::size_t size() const { return end - begin; }
  friend constexpr bool operator==(const ItemRange&, const ItemRange&) = default;
};

class ChunkPlan {
 public:
  // A uniform plan: chunks of `chunk_items`, the last one shorter. Throws
  // std::invalid_argument when chunk_items is zero.
  ChunkPlan(std::size_t item_count, std::size_t chunk_items);

  // A plan whose chunks grow from `first_items`, doubling, to `chunk_items`,
  // and shrink back at the end. Falls back to fewer ramp steps, then to a
  // uniform plan, when the items are too few for a full ramp at both ends.
  // Throws std::invalid_argument when either size is zero.
  static ChunkPlan ramped(std::size_t item_count, std::size_t chunk_items, std::size_t first_items);

  std::size_t item_count() const { return item_count_; }
  // The largest chunk of this plan (never more than the items): what a device slot must hold.
  std::size_t chunk_items() const { return chunk_items_; }
  std::size_t chunk_count() const { return ramp_up_.size() + middle_count_ + ramp_down_.size(); }
  bool is_ramped() const { return !ramp_up_.empty(); }

  // Throws std::out_of_range past the last chunk.
  ItemRange chunk(std::size_t index) const;

 private:
  ChunkPlan() = default;
  std::size_t item_count_ = 0;
  std::size_t chunk_items_ = 1;
  // Ramped plans: explicit sizes at both ends, `middle_count_` balanced
  // chunks between them (sizes differ by at most one item).
  std::vector<std::size_t> ramp_up_, ramp_down_;
  std::size_t middle_begin_ = 0;
  std::size_t middle_items_ = 0;
  std::size_t middle_count_ = 0;
  bool uniform_ = true;
};

}  // namespace sluice
