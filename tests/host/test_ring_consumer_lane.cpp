// What the ring asks of the consumer's lane per position: at a 0.2 ms step
// every operation on the consumer's stream shows as idle, so where the
// release of i - 1 meets the take of i (held 1) the ring asks for both at
// once (release_and_take), which the CUDA executor enqueues as one event.
#include <gtest/gtest.h>

#include "ring_test.hpp"

namespace sluice::test {

namespace {

// Runs everything on a host executor and counts the consumer's calls.
class CountingExecutor final : public RingExecutor {
 public:
  explicit CountingExecutor(HostRingExecutor& inner) : inner_(inner) {}
  std::size_t takes = 0, releases = 0, both = 0;

  void make_slots(const RingPlan& plan) override { inner_.make_slots(plan); }
  std::byte* staging_slot(std::size_t slot) override { return inner_.staging_slot(slot); }
  std::byte* device_slot(std::size_t slot) override { return inner_.device_slot(slot); }
  std::shared_ptr<void> slot_memory(std::size_t slot) override { return inner_.slot_memory(slot); }
  void stage(const RingOp& op, std::size_t bytes, const Fill& fill) override { inner_.stage(op, bytes, fill); }
  void copy(const RingOp& op, std::size_t bytes, const std::vector<CopyPiece>& pieces) override { inner_.copy(op, bytes, pieces); }
  void transform(const RingOp& op, std::size_t bytes, const Transform& fn) override { inner_.transform(op, bytes, fn); }
  void ready(const RingOp& op) override { inner_.ready(op); }
  void take(const RingOp& op, ConsumerLane lane) override { ++takes, inner_.take(op, lane); }
  void release(const RingOp& op, ConsumerLane lane) override { ++releases, inner_.release(op, lane); }
  void release_and_take(const RingOp& r, const RingOp& t, ConsumerLane lane) override { ++both, inner_.release_and_take(r, t, lane); }
  void mark(const RingOp& op, ConsumerLane lane) override { inner_.mark(op, lane); }
  void drain(const RingOp& op, std::size_t bytes, const Drain& fn) override { inner_.drain(op, bytes, fn); }
  void detach(const RingOp& op) override { inner_.detach(op); }
  std::optional<LaneFailure> failure() const override { return inner_.failure(); }
  void host_wait(OpRef op) override { inner_.host_wait(op); }
  bool copied(std::size_t position) const override { return inner_.copied(position); }
  IdleTimes idle() const override { return inner_.idle(); }
  void finish() noexcept override { inner_.finish(); }

 private:
  HostRingExecutor& inner_;
};

}  // namespace

TEST(RingConsumerLane, HeldOneEachTakeAfterTheFirstIsOneCallWithTheRelease) {
  HostRingExecutor host;
  CountingExecutor executor(host);
  {
    Ring ring(RingPlan(ring_options(6, 2)), executor, {.fill = fill_item});
    while (ring.take()) {
    }
  }
  EXPECT_EQ(executor.takes, 1u);     // the first: nothing held to release
  EXPECT_EQ(executor.both, 5u);      // positions 1 .. 5, each with the release of the one before
  EXPECT_EQ(executor.releases, 1u);  // the last, at the end
  EXPECT_TRUE(host.violations().empty()) << first_violation(host);
  EXPECT_EQ(host.idle().taken, 6u);
}

TEST(RingConsumerLane, HeldTwoTheReleaseMeetsTheTakeTwoPositionsOn) {
  HostRingExecutor host;
  CountingExecutor executor(host);
  RingOptions o = ring_options(6, 2);
  o.held = 2;
  {
    Ring ring(RingPlan(o), executor, {.fill = fill_item});
    while (ring.take()) {
    }
  }
  EXPECT_EQ(executor.takes, 2u);
  EXPECT_EQ(executor.both, 4u);
  EXPECT_EQ(executor.releases, 2u);
  EXPECT_TRUE(host.violations().empty()) << first_violation(host);
}

}  // namespace sluice::test
