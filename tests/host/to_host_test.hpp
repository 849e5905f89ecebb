#pragma once
// What the tests of the ring to the host share: the caller's "device" memory
// (host memory on the host executor) that the caller's work writes on the
// consumer's lane before each put, as kernels on its stream would; drains
// that check each position's bytes are its item's; and a driver that runs a
// ToHostRing to its end and says what happened. Host-only.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ring/to_host_ring.hpp"
#include "ring_test.hpp"

namespace sluice::test {

// Waits until `done` or `limit` passes; whether it came true.
template <typename Done>
bool wait_until(Done&& done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

inline bool any_names(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines)
    if (l.find(part) != std::string::npos) return true;
  return false;
}
inline std::string first_of(const std::vector<std::string>& lines) { return lines.empty() ? "none" : lines.front(); }

inline constexpr std::byte unwritten{0xEE};  // device memory no work has written yet

// The caller's device memory: ahead + 1 buffers in turn. A position's bytes
// may be let go once the put `ahead` positions later has returned, and the
// next position's work is enqueued before its own put: so ahead + 1 are live.
class DeviceBuffers {
 public:
  DeviceBuffers(std::size_t ahead, std::size_t bytes) : buffers_(ahead + 1, std::vector<std::byte>(bytes, unwritten)) {}
  std::byte* at(std::size_t position) { return buffers_[position % buffers_.size()].data(); }

 private:
  std::vector<std::vector<std::byte>> buffers_;
};

struct ToHostCase {
  std::size_t items = 16;
  std::size_t steps = 1;
  std::size_t ahead = 2;
  std::size_t staging = 0;  // 0: ahead
  bool staged = true;
  std::size_t slot_bytes = 256;
  std::size_t start = 0;
  // An item's bytes; empty: slot_bytes.
  std::function<std::size_t(std::size_t item)> size = {};
};

// Where a test steps in; each is given the ring and the position.
struct ToHostHooks {
  // On the consumer's lane, in the caller's work, before it writes the position's bytes.
  std::function<void(ToHostRing&, std::size_t)> before_work = {};
  // In the drain, between two reads of its bytes (a slot overwritten meanwhile shows).
  std::function<void(ToHostRing&, std::size_t)> hold_drain = {};
  // In the drain, first: may throw to fail the position.
  std::function<void(std::size_t)> enter_drain = {};
};

struct ToHostOutcome {
  std::vector<std::size_t> drained_positions;  // in the order the drains ran
  std::size_t wrong = 0;          // bytes the drains found that were not their item's
  std::size_t wrong_sizes = 0;    // drains handed a span of the wrong size
  std::size_t put = 0;            // positions put() returned
  std::size_t drained = 0;        // ring.drained() after finish()
  std::optional<RingError> put_error, finish_error;
  std::vector<std::string> violations;
  std::size_t operations_checked = 0;
  // Unstaged: what arrived in the caller's memory, and what should have.
  std::vector<std::byte> out, expected;
};

inline RingOptions to_host_options(const ToHostCase& c) {
  RingOptions o;
  o.items = c.items;
  o.steps = c.steps;
  o.direction = Direction::to_host;
  o.ahead = c.ahead;
  o.staging_slots = c.staging;
  o.staged = c.staged;
  o.slot_bytes = c.slot_bytes;
  o.start = c.start;
  return o;
}

// Puts every position of the case's plan (the caller's work writing its
// bytes on the consumer's lane first), then finish(); a RingError from either
// ends up in the outcome.
inline ToHostOutcome run_to_host(const ToHostCase& c, HostRingExecutor& executor, const ToHostHooks& hooks = {}) {
  const RingPlan plan(to_host_options(c));
  auto size = [&](std::size_t item) { return c.size ? c.size(item) : c.slot_bytes; };
  std::size_t largest = 0, total = 0;
  std::vector<std::size_t> out_at(plan.positions(), 0);
  for (std::size_t p = plan.start(); p < plan.positions(); ++p) {
    out_at[p] = total;
    largest = std::max(largest, size(plan.item(p)));
    total += size(plan.item(p));
  }
  DeviceBuffers device(c.ahead, largest);
  ToHostOutcome outcome;
  outcome.out.assign(total, unwritten);
  outcome.expected.assign(total, unwritten);
  struct Record {
    std::mutex mutex;
    std::vector<std::size_t> positions;
    std::size_t wrong = 0, wrong_sizes = 0;
  };
  auto record = std::make_shared<Record>();
  {
    ToHostRing ring(plan, executor);
    try {
      for (std::size_t p = plan.start(); p < plan.positions(); ++p) {
        const std::size_t item = plan.item(p), n = size(item);
        std::byte* from = device.at(p);
        fill_item(item, {outcome.expected.data() + out_at[p], n});
        executor.on_consumer([&ring, &hooks, p, item, n, from] {
          if (hooks.before_work) hooks.before_work(ring, p);
          fill_item(item, {from, n});
        });
        ToHostRing::Item it;
        std::byte* at = outcome.out.data() + out_at[p];
        std::byte* to = c.staged ? nullptr : at;
        if (c.staged) {
          // Two pieces, the second first: each lands at its own offset in the slot.
          it.bytes = n;
          it.pieces = {{from + n / 2, n / 2, n - n / 2}, {from, 0, n / 2}};
        } else {
          it.pieces = {{from, 0, n, to}};
        }
        it.drain = [&ring, &hooks, record, p, item, n, at, staged = c.staged](std::span<const std::byte> bytes) {
          if (hooks.enter_drain) hooks.enter_drain(p);
          const std::byte* data = staged ? bytes.data() : at;
          const bool right_size = staged ? bytes.size() == n : bytes.empty();
          std::size_t bad = right_size ? wrong_bytes(data, n, item) : 0;
          if (hooks.hold_drain) {
            hooks.hold_drain(ring, p);
            if (right_size) bad += wrong_bytes(data, n, item);
          }
          if (staged && right_size) std::memcpy(at, bytes.data(), n);  // what arrived, kept
          std::lock_guard lock(record->mutex);
          record->positions.push_back(p);
          record->wrong += bad;
          record->wrong_sizes += right_size ? 0 : 1;
        };
        ring.put(std::move(it));
        ++outcome.put;
      }
    } catch (const RingError& e) {
      outcome.put_error = e;
    }
    try {
      ring.finish();
    } catch (const RingError& e) {
      outcome.finish_error = e;
    }
    outcome.drained = ring.drained();
  }
  std::lock_guard lock(record->mutex);
  outcome.drained_positions = record->positions;
  outcome.wrong = record->wrong;
  outcome.wrong_sizes = record->wrong_sizes;
  outcome.violations = executor.violations();
  outcome.operations_checked = executor.operations_checked();
  return outcome;
}

// A host executor whose copy() refuses one position as it is enqueued (as
// a GPU's cudaMemcpyAsync may): a failure on the caller's side of put().
class CopyRefusingExecutor final : public RingExecutor {
 public:
  CopyRefusingExecutor(HostRingExecutor& inner, std::size_t refused) : in_(inner), refused_(refused) {}
  void make_slots(const RingPlan& plan) override { in_.make_slots(plan); }
  std::byte* staging_slot(std::size_t slot) override { return in_.staging_slot(slot); }
  std::byte* device_slot(std::size_t slot) override { return in_.device_slot(slot); }
  std::shared_ptr<void> slot_memory(std::size_t slot) override { return in_.slot_memory(slot); }
  void stage(const RingOp& op, std::size_t bytes, const Fill& fill) override { in_.stage(op, bytes, fill); }
  void copy(const RingOp& op, std::size_t bytes, const std::vector<CopyPiece>& pieces) override {
    if (op.ref.position == refused_) throw std::runtime_error("the copy was refused");
    in_.copy(op, bytes, pieces);
  }
  void transform(const RingOp& op, std::size_t bytes, const Transform& fn) override { in_.transform(op, bytes, fn); }
  void ready(const RingOp& op) override { in_.ready(op); }
  void take(const RingOp& op, ConsumerLane lane) override { in_.take(op, lane); }
  void release(const RingOp& op, ConsumerLane lane) override { in_.release(op, lane); }
  void mark(const RingOp& op, ConsumerLane lane) override { in_.mark(op, lane); }
  void drain(const RingOp& op, std::size_t bytes, const Drain& drain) override { in_.drain(op, bytes, drain); }
  void detach(const RingOp& op) override { in_.detach(op); }
  std::optional<LaneFailure> failure() const override { return in_.failure(); }
  void host_wait(OpRef op) override { in_.host_wait(op); }
  bool copied(std::size_t position) const override { return in_.copied(position); }
  IdleTimes idle() const override { return in_.idle(); }
  bool keeps(const RingOp& op, const RingEdge& edge) const override { return in_.keeps(op, edge); }
  void finish() noexcept override { in_.finish(); }

 private:
  HostRingExecutor& in_;
  std::size_t refused_;
};

inline std::vector<std::size_t> positions_from(std::size_t start, std::size_t end) {
  std::vector<std::size_t> v;
  for (std::size_t p = start; p < end; ++p) v.push_back(p);
  return v;
}

// A run that went right: every position put, drained in order with its own
// bytes, no rule broken, nothing left held.
inline void expect_right(const ToHostOutcome& o, const HostRingExecutor& executor, std::size_t start, std::size_t end) {
  EXPECT_FALSE(o.put_error) << o.put_error->what();
  EXPECT_FALSE(o.finish_error) << o.finish_error->what();
  EXPECT_EQ(o.put, end - start);
  EXPECT_EQ(o.drained, end);
  EXPECT_EQ(o.drained_positions, positions_from(start, end));
  EXPECT_EQ(o.wrong, 0u);
  EXPECT_EQ(o.wrong_sizes, 0u);
  EXPECT_TRUE(o.out == o.expected) << "the caller's memory does not hold every item's bytes";
  EXPECT_TRUE(o.violations.empty()) << first_of(o.violations);
  EXPECT_GT(o.operations_checked, 0u);
  expect_nothing_held(executor);
}

}  // namespace sluice::test
