#include "sluice/batch_plan.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace sluice {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

BatchPlan::BatchPlan(std::size_t items, BatchPlanOptions options) : items_(items), options_(options) {
  if (options.batch == 0) throw std::invalid_argument("batch plan: a batch needs at least one item");
  if (options.world == 0) throw std::invalid_argument("batch plan: world size must be at least 1");
  if (options.rank >= options.world)
    throw std::invalid_argument("batch plan: rank " + std::to_string(options.rank) + " is outside a world of " +
                                std::to_string(options.world));
  rank_items_ = items > options.rank ? (items - options.rank + options.world - 1) / options.world : 0;
  if (options.drop_last) rank_items_ = items / options.world / options.batch * options.batch;
  if (rank_items_ == 0)
    throw std::invalid_argument("batch plan: " + std::to_string(items) + " items give rank " + std::to_string(options.rank) +
                                " of " + std::to_string(options.world) + " no " +
                                (options.drop_last ? "full batch of " + std::to_string(options.batch) : "item"));
  // A Feistel network permutes an even number of bits; cycle-walking maps it onto [0, items).
  unsigned bits = 2;
  while (bits < 64 && (std::uint64_t{1} << bits) < items) bits += 2;
  half_bits_ = bits / 2;
}

std::size_t BatchPlan::batch_rows(std::size_t b) const {
  if (b >= batches_per_epoch()) throw std::out_of_range("batch " + std::to_string(b) + " is past the epoch's last");
  return std::min(options_.batch, rank_items_ - b * options_.batch);
}

std::size_t BatchPlan::permuted(std::uint64_t epoch, std::size_t position) const {
  if (position >= items_) throw std::out_of_range("position past the items");
  if (!options_.shuffle || items_ <= 1) return position;
  const std::uint64_t mask = (std::uint64_t{1} << half_bits_) - 1;
  std::uint64_t keys[4];
  for (int r = 0; r < 4; ++r) keys[r] = splitmix64(options_.seed ^ splitmix64(epoch * 4 + static_cast<std::uint64_t>(r)));
  std::uint64_t x = position;
  do {
    std::uint64_t left = x >> half_bits_, right = x & mask;
    for (std::uint64_t key : keys) {
      const std::uint64_t mixed = left ^ (splitmix64(right ^ key) & mask);
      left = right;
      right = mixed;
    }
    x = (left << half_bits_) | right;
  } while (x >= items_);  // outside the domain: walk on; it returns inside in a few steps
  return static_cast<std::size_t>(x);
}

std::size_t BatchPlan::item(std::uint64_t epoch, std::size_t b, std::size_t row) const {
  if (row >= batch_rows(b)) throw std::out_of_range("row past the batch");
  const std::size_t share = b * options_.batch + row;  // this rank's position
  return permuted(epoch, share * options_.world + options_.rank);
}

LoaderState BatchPlan::next(LoaderState state) const {
  if (++state.batch >= batches_per_epoch()) {
    state.batch = 0;
    ++state.epoch;
  }
  return state;
}

}  // namespace sluice
