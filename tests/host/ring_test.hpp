#pragma once
// What the ring's tests share: items whose bytes say which item they are, and
// a consumer that takes a ring to its end, checking on its lane that every
// slot holds the bytes of the item its position names. Host-only.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "ring/host_ring_executor.hpp"
#include "ring/ring.hpp"
#include "run_probes.hpp"

namespace sluice::test {

using namespace sluice::ring;

// Byte k of item `item`: differs between any two items below 256 at every k.
inline std::byte item_byte(std::size_t item, std::size_t k) {
  return static_cast<std::byte>((item * 37 + k * 11 + 5) & 0xff);
}
inline void fill_item(std::size_t item, std::span<std::byte> slot) {
  for (std::size_t k = 0; k < slot.size(); ++k) slot[k] = item_byte(item, k);
}
// Bytes of `data` that are not item `item`'s.
inline std::size_t wrong_bytes(const std::byte* data, std::size_t bytes, std::size_t item) {
  std::size_t wrong = 0;
  for (std::size_t k = 0; k < bytes; ++k) wrong += data[k] != item_byte(item, k);
  return wrong;
}

inline std::vector<std::size_t> upto(std::size_t n) {
  std::vector<std::size_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

inline RingOptions ring_options(std::size_t items, std::size_t ahead = 2, Order order = Order::batches, std::size_t steps = 1) {
  RingOptions o;
  o.items = items;
  o.ahead = ahead;
  o.order = order;
  o.steps = steps;
  o.slot_bytes = 256;
  return o;
}

// What a consumer saw: the positions and items take() gave, in order, and
// the bytes its lane found wrong.
struct Seen {
  std::vector<std::size_t> positions, items, slots;
  std::shared_ptr<std::atomic<std::size_t>> wrong = std::make_shared<std::atomic<std::size_t>>(0);
  std::shared_ptr<std::atomic<std::size_t>> checked = std::make_shared<std::atomic<std::size_t>>(0);
};

// Enqueues on the consumer's lane a check of the slot's bytes (twice, with
// `hold` between: a slot overwritten while the consumer reads it shows).
inline void check_on_lane(HostRingExecutor& executor, const Ring::Taken& t, Seen& seen,
                          std::function<void()> hold = {}) {
  executor.on_consumer([t, wrong = seen.wrong, checked = seen.checked, hold] {
    std::size_t bad = wrong_bytes(t.data, t.bytes, t.item);
    if (hold) hold();
    bad += wrong_bytes(t.data, t.bytes, t.item);
    *wrong += bad;
    ++*checked;
  });
}

// Takes `ring` to its end (or `limit` positions), checking every slot on the lane.
inline Seen consume(Ring& ring, HostRingExecutor& executor, std::size_t limit = SIZE_MAX) {
  Seen seen;
  for (std::size_t n = 0; n < limit; ++n) {
    const auto t = ring.take();
    if (!t) break;
    seen.positions.push_back(t->position);
    seen.items.push_back(t->item);
    seen.slots.push_back(t->slot);
    check_on_lane(executor, *t, seen);
  }
  return seen;
}

// The ring has left nothing behind: no slots, lanes or pending work.
inline void expect_nothing_held(const HostRingExecutor& executor) {
  const auto h = executor.holdings();
  EXPECT_EQ(h.device_bytes, 0u);
  EXPECT_EQ(h.staging_bytes, 0u);
  EXPECT_EQ(h.lane_threads, 0u);
  EXPECT_EQ(h.pending, 0u);
}

inline std::string first_violation(const HostRingExecutor& executor) {
  const auto v = executor.violations();
  return v.empty() ? "none" : v.front();
}

}  // namespace sluice::test
