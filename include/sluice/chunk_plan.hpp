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
