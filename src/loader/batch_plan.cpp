#include "sluice/loader/batch_plan.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/splitmix64.hpp"

namespace sluice {

namespace {

using detail::splitmix64;

std::string state_text(LoaderState state) {
  return "epoch " + std::to_string(state.epoch) + ", sample " + std::to_string(state.sample);
}

}  // namespace

BatchPlan::BatchPlan(std::size_t items, BatchPlanOptions options) : items_(items), options_(options) {
  if (options.batch == 0) throw std::invalid_argument("batch plan: a batch needs at least one item");
  if (options.world == 0) throw std::invalid_argument("batch plan: world size must be at least 1");
  if (options.rank >= options.world)
    throw std::invalid_argument("batch plan: rank " + std::to_string(options.rank) + " is outside a world of " +
                                std::to_string(options.world));
  if (options.batch > items / options.world)
    throw std::invalid_argument("batch plan: a global batch of " + std::to_string(options.batch) + " rows x " +
                                std::to_string(options.world) + (options.world == 1 ? " rank" : " ranks") +
                                " is larger than the " + std::to_string(items) + " items of the data");
  // A Feistel network permutes an even number of bits; cycle-walking maps it onto [0, items).
  unsigned bits = 2;
  while (bits < 64 && (std::uint64_t{1} << bits) < items) bits += 2;
  half_bits_ = bits / 2;
}

std::size_t BatchPlan::batches_left(LoaderState state) const {
  if (state.sample >= items_) return 0;
  const std::size_t left = items_ - state.sample, global = global_batch();
  return options_.drop_last ? left / global : (left + global - 1) / global;
}

LoaderState BatchPlan::resume_at(LoaderState state) const {
  if (state.sample > items_)
    throw std::invalid_argument("batch plan: the state's " + state_text(state) + " is past the epoch's " +
                                std::to_string(items_) + " items: it was saved over other data");
  if (batches_left(state) == 0) return {state.epoch + 1, 0};
  return state;
}

void BatchPlan::check(LoaderState state) const {
  if (batches_left(state) == 0)
    throw std::out_of_range("batch plan: no batch starts at " + state_text(state) + " (" + std::to_string(items_) +
                            " items, global batch " + std::to_string(global_batch()) + ")");
}

std::size_t BatchPlan::batch_rows(LoaderState state) const {
  check(state);
  const std::size_t first = state.sample + options_.rank * options_.batch;
  if (pads() || first + options_.batch <= items_) return options_.batch;
  return items_ - first;  // world 1, the short tail
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

std::size_t BatchPlan::item(LoaderState state, std::size_t row) const {
  if (row >= batch_rows(state)) throw std::out_of_range("row past the batch");
  std::size_t position = state.sample + options_.rank * options_.batch + row;
  if (position >= items_) position -= items_;  // the padded tail: the epoch's first positions again
  return permuted(state.epoch, position);
}

LoaderState BatchPlan::next(LoaderState state) const {
  check(state);
  state.sample += global_batch();
  if (batches_left(state) == 0) return {state.epoch + 1, 0};
  return state;
}

}  // namespace sluice
