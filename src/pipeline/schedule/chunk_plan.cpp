#include "sluice/pipeline/chunk_plan.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>

namespace sluice {

namespace {
// ceil(a / b) for b > 0, without the a + b - 1 that wraps for counts near the top of size_t.
std::size_t divide_rounding_up(std::size_t a, std::size_t b) { return a / b + (a % b != 0 ? 1 : 0); }
}  // namespace

ChunkPlan::ChunkPlan(std::size_t item_count, std::size_t chunk_items)
    : item_count_(item_count), chunk_items_(std::max<std::size_t>(1, std::min(chunk_items, item_count))) {
  if (chunk_items == 0) throw std::invalid_argument("chunk size must be at least 1 item");
  middle_items_ = item_count;
  middle_count_ = divide_rounding_up(item_count, chunk_items_);
}

ChunkPlan ChunkPlan::ramped(std::size_t item_count, std::size_t chunk_items, std::size_t first_items) {
  if (chunk_items == 0 || first_items == 0) throw std::invalid_argument("chunk sizes must be at least 1 item");
  std::vector<std::size_t> steps;  // f, 2f, 4f, ... below chunk_items
  for (std::size_t size = first_items; size < chunk_items; size *= 2) {
    steps.push_back(size);
    if (size > chunk_items / 2) break;  // the next step would reach chunk_items (and could wrap past the top of size_t)
  }
  // Take the largest steps off until the middle holds at least one chunk
  // and its balanced chunks are no smaller than the ramp's: the sizes then
  // never shrink on the way up nor grow on the way down.
  while (!steps.empty()) {
    // One end's steps add up to less than twice the largest, which may pass the top of size_t
    // for chunk sizes near it: the sum stops there, where it cannot fit anyway.
    std::size_t end_items = 0;
    for (std::size_t step : steps) end_items = step > SIZE_MAX - end_items ? SIZE_MAX : end_items + step;
    const bool fits = end_items <= item_count / 2 && item_count - 2 * end_items >= chunk_items;
    if (fits) {
      const std::size_t ramp_items = 2 * end_items;
      const std::size_t middle = item_count - ramp_items;
      const std::size_t count = divide_rounding_up(middle, chunk_items);
      if (middle / count >= steps.back()) {
        ChunkPlan plan;
        plan.item_count_ = item_count;
        plan.chunk_items_ = middle / count + (middle % count > 0 ? 1 : 0);  // the largest balanced chunk
        plan.uniform_ = false;
        plan.ramp_up_ = steps;
        plan.ramp_down_.assign(steps.rbegin(), steps.rend());
        plan.middle_begin_ = ramp_items / 2;
        plan.middle_items_ = middle;
        plan.middle_count_ = count;
        return plan;
      }
    }
    steps.pop_back();
  }
  return ChunkPlan(item_count, chunk_items);
}

ItemRange ChunkPlan::chunk(std::size_t index) const {
  if (index >= chunk_count()) throw std::out_of_range("chunk index past the end of the plan");
  if (uniform_) {
    const std::size_t begin = index * chunk_items_;
    return {begin, begin + std::min(chunk_items_, item_count_ - begin)};
  }
  if (index < ramp_up_.size()) {
    std::size_t begin = 0;
    for (std::size_t k = 0; k < index; ++k) begin += ramp_up_[k];
    return {begin, begin + ramp_up_[index]};
  }
  index -= ramp_up_.size();
  if (index < middle_count_) {
    // Balanced: the first `extra` middle chunks hold one item more.
    const std::size_t base = middle_items_ / middle_count_, extra = middle_items_ % middle_count_;
    const std::size_t begin = middle_begin_ + index * base + std::min(index, extra);
    return {begin, begin + base + (index < extra ? 1 : 0)};
  }
  index -= middle_count_;
  std::size_t begin = middle_begin_ + middle_items_;
  for (std::size_t k = 0; k < index; ++k) begin += ramp_down_[k];
  return {begin, begin + ramp_down_[index]};
}

}  // namespace sluice
