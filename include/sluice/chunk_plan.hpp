#pragma once
// How a run of `item_count` items is cut into chunks of at most
// `chunk_items`. The last chunk may be shorter. Host-only.
#include <cstddef>
#include <stdexcept>

namespace sluice {

struct ItemRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  constexpr std::size_t size() const { return end - begin; }
  friend constexpr bool operator==(const ItemRange&, const ItemRange&) = default;
};

// A chunk size for when the caller sets none: about 1/128 of the data, so that
// filling and draining the pipeline (one chunk each) costs under 2%, kept
// between 2 MiB (below that, per-copy fixed costs show) and 16 MiB (copies
// reach full speed by 4 MiB on PCIe Gen4/5) of the widest span.
constexpr std::size_t default_chunk_items(std::size_t item_count, std::size_t widest_item_bytes) {
  constexpr std::size_t min_bytes = std::size_t{2} << 20, max_bytes = std::size_t{16} << 20;
  if (item_count == 0 || widest_item_bytes == 0) return 1;
  const std::size_t min_items = (min_bytes + widest_item_bytes - 1) / widest_item_bytes;
  const std::size_t max_items = max_bytes / widest_item_bytes > 0 ? max_bytes / widest_item_bytes : 1;
  std::size_t items = item_count / 128;
  if (items < min_items) items = min_items;
  if (items > max_items) items = max_items;
  return items < item_count ? items : item_count;
}

class ChunkPlan {
 public:
  // Throws std::invalid_argument when chunk_items is zero.
  ChunkPlan(std::size_t item_count, std::size_t chunk_items)
      : item_count_(item_count), chunk_items_(chunk_items) {
    if (chunk_items == 0) throw std::invalid_argument("chunk size must be at least 1 item");
  }

  std::size_t item_count() const { return item_count_; }
  std::size_t chunk_items() const { return chunk_items_; }
  std::size_t chunk_count() const { return (item_count_ + chunk_items_ - 1) / chunk_items_; }

  ItemRange chunk(std::size_t index) const {
    if (index >= chunk_count()) throw std::out_of_range("chunk index past the end of the plan");
    const std::size_t begin = index * chunk_items_;
    const std::size_t end = begin + chunk_items_ < item_count_ ? begin + chunk_items_ : item_count_;
    return {begin, end};
  }

 private:
  std::size_t item_count_;
  std::size_t chunk_items_;
};

}  // namespace sluice
