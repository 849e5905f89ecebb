// The ring engine on the host executor: positions taken in the plan's order,
// each slot holding its item's bytes (checked on the consumer's lane), slots
// reused only once released, the producer's lead, both orders, resuming,
// unstaged rings, and shutdown that leaves nothing behind.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ring_test.hpp"

namespace sluice::test {

TEST(Ring, TakesEveryPositionInPlanOrder) {
  HostRingExecutor executor;
  Seen seen;
  {
    Ring ring(RingPlan(ring_options(10)), executor, {.fill = fill_item});
    seen = consume(ring, executor);
  }
  EXPECT_EQ(seen.positions, upto(10));
  EXPECT_EQ(seen.items, upto(10));
}

TEST(Ring, EachSlotHoldsItsItemsBytes) {
  HostRingExecutor executor;
  Seen seen;
  {
    Ring ring(RingPlan(ring_options(12, 3)), executor, {.fill = fill_item});
    seen = consume(ring, executor);
  }
  EXPECT_EQ(*seen.checked, 12u);
  EXPECT_EQ(*seen.wrong, 0u);
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
}

TEST(Ring, SlotsAreUsedInTurn) {
  HostRingExecutor executor;
  Seen seen;
  {
    Ring ring(RingPlan(ring_options(7, 2)), executor, {.fill = fill_item});
    seen = consume(ring, executor);
  }
  EXPECT_EQ(seen.slots, (std::vector<std::size_t>{0, 1, 2, 0, 1, 2, 0}));
}

TEST(Ring, LayersGoForwardThenBackwardOverSteps) {
  HostRingExecutor executor;
  Seen seen;
  {
    Ring ring(RingPlan(ring_options(4, 2, Order::layers, 3)), executor, {.fill = fill_item});
    seen = consume(ring, executor);
  }
  const std::vector<std::size_t> step{0, 1, 2, 3, 3, 2, 1, 0};
  std::vector<std::size_t> expected;
  for (int s = 0; s < 3; ++s) expected.insert(expected.end(), step.begin(), step.end());
  EXPECT_EQ(seen.items, expected);
  EXPECT_EQ(seen.positions, upto(24));
  EXPECT_EQ(*seen.wrong, 0u);
}

TEST(Ring, BatchesRepeatOverEpochs) {
  HostRingExecutor executor;
  Seen seen;
  {
    Ring ring(RingPlan(ring_options(3, 1, Order::batches, 3)), executor, {.fill = fill_item});
    seen = consume(ring, executor);
  }
  EXPECT_EQ(seen.items, (std::vector<std::size_t>{0, 1, 2, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(*seen.wrong, 0u);
}

TEST(Ring, EveryOperationOfThePlanIsChecked) {
  HostRingExecutor executor;
  {
    Ring ring(RingPlan(ring_options(9)), executor, {.fill = fill_item});
    consume(ring, executor);
    EXPECT_FALSE(ring.take().has_value());  // past the end, again
  }
  EXPECT_EQ(executor.operations_checked(), 45u);  // stage, copy, ready, take, release of 9 positions
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
}

// Slot reuse under pressure: every operation and every check on the
// consumer's lane pauses at random, so the lanes meet in a different order
// for each seed; no slot is ever written before its release.
class RingJitter : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(RingJitter, NoSlotIsOverwrittenBeforeItsRelease) {
  const std::uint64_t seed = GetParam();
  HostRingExecutor executor({.jitter_us = 300, .seed = seed});
  Seen seen;
  const std::size_t ahead = 1 + seed % 3;
  const Order order = seed % 2 ? Order::layers : Order::batches;
  {
    Ring ring(RingPlan(ring_options(6, ahead, order, 2)), executor, {.fill = fill_item});
    seen = consume(ring, executor);
  }
  EXPECT_EQ(seen.positions.size(), order == Order::layers ? 24u : 12u);
  EXPECT_EQ(*seen.wrong, 0u);
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
  expect_nothing_held(executor);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RingJitter, ::testing::Range<std::uint64_t>(1, 25));

TEST(Ring, MoreSlotsThanAheadNeedsAreUsedToo) {
  HostRingExecutor executor({.jitter_us = 100, .seed = 7});
  RingOptions o = ring_options(10, 2);
  o.slots = 5;
  Seen seen;
  {
    Ring ring{RingPlan(o), executor, {.fill = fill_item}};
    seen = consume(ring, executor);
  }
  EXPECT_EQ(seen.slots, (std::vector<std::size_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
  EXPECT_EQ(*seen.wrong, 0u);
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
}

// The producer starts position p only once the consumer has taken p - ahead.
TEST(Ring, TheProducerStaysAtMostAheadPositionsBeyondTheConsumer) {
  for (std::size_t ahead : {1u, 2u, 4u}) {
    SCOPED_TRACE("ahead " + std::to_string(ahead));
    HostRingExecutor executor({.jitter_us = 50, .seed = ahead});
    std::atomic<Ring*> ring_at{nullptr};
    std::atomic<std::size_t> too_far{0}, fills{0};
    auto fill = [&](std::size_t item, std::span<std::byte> slot) {
      while (!ring_at.load()) std::this_thread::yield();
      if (item >= ring_at.load()->next_position() + ahead) ++too_far;  // batches of one step: item == position
      ++fills;
      fill_item(item, slot);
    };
    Ring ring(RingPlan(ring_options(12, ahead)), executor, {.fill = fill});
    ring_at = &ring;
    // Not taking: the producer fills `ahead` positions and no more.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_LE(fills.load(), ahead);
    const Seen seen = consume(ring, executor);
    ring.stop();
    EXPECT_EQ(seen.positions, upto(12));
    EXPECT_EQ(too_far.load(), 0u);
    EXPECT_EQ(*seen.wrong, 0u);
  }
}

TEST(Ring, AnExplicitReleaseFreesTheSlotBeforeTheNextTake) {
  HostRingExecutor executor({.jitter_us = 100, .seed = 3});
  Seen seen;
  {
    Ring ring(RingPlan(ring_options(8, 1)), executor, {.fill = fill_item});
    while (const auto t = ring.take()) {
      seen.items.push_back(t->item);
      check_on_lane(executor, *t, seen);
      ring.release(t->position);
    }
  }
  EXPECT_EQ(seen.items, upto(8));
  EXPECT_EQ(*seen.wrong, 0u);
  EXPECT_EQ(executor.operations_checked(), 40u);
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
}

TEST(Ring, ReleasingAPositionTheConsumerDoesNotHoldIsRefused) {
  HostRingExecutor executor;
  Ring ring(RingPlan(ring_options(4)), executor, {.fill = fill_item});
  EXPECT_THROW(ring.release(0), std::logic_error);  // nothing taken yet
  const auto t = ring.take();
  ASSERT_TRUE(t);
  EXPECT_THROW(ring.release(1), std::logic_error);
  ring.release(0);
  EXPECT_THROW(ring.release(0), std::logic_error);  // released already
}

TEST(Ring, AResumedRingStartsAtItsPosition) {
  HostRingExecutor executor;
  RingOptions o = ring_options(3, 2, Order::layers, 2);  // items 0 1 2 2 1 0 0 1 2 2 1 0
  o.start = 4;
  Seen seen;
  {
    Ring ring(RingPlan(o), executor, {.fill = fill_item});
    seen = consume(ring, executor);
  }
  EXPECT_EQ(seen.positions, (std::vector<std::size_t>{4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(seen.items, (std::vector<std::size_t>{1, 0, 0, 1, 2, 2, 1, 0}));
  EXPECT_EQ(*seen.wrong, 0u);
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
}

TEST(Ring, ARingResumedWhereAnotherStoppedGoesOnFromThere) {
  HostRingExecutor executor({.jitter_us = 50, .seed = 11});
  std::size_t resume_at = 0;
  Seen first, rest;
  {
    Ring ring(RingPlan(ring_options(10, 2)), executor, {.fill = fill_item});
    first = consume(ring, executor, 4);
    resume_at = ring.next_position();
  }
  EXPECT_EQ(resume_at, 4u);
  RingOptions o = ring_options(10, 2);
  o.start = resume_at;
  {
    Ring ring(RingPlan(o), executor, {.fill = fill_item});
    rest = consume(ring, executor);
  }
  std::vector<std::size_t> all = first.items;
  all.insert(all.end(), rest.items.begin(), rest.items.end());
  EXPECT_EQ(all, upto(10));
  EXPECT_EQ(*first.wrong + *rest.wrong, 0u);
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
}

TEST(Ring, AnUnstagedRingCopiesFromTheCallersMemory) {
  HostRingExecutor executor({.jitter_us = 100, .seed = 5});
  RingOptions o = ring_options(6, 2, Order::layers, 2);
  o.staged = false;
  std::vector<std::vector<std::byte>> layers(6, std::vector<std::byte>(o.slot_bytes));
  for (std::size_t i = 0; i < layers.size(); ++i) fill_item(i, layers[i]);
  Seen seen;
  {
    Ring ring(RingPlan(o), executor, {.source = [&](std::size_t item) -> const std::byte* { return layers[item].data(); }});
    seen = consume(ring, executor);
    EXPECT_FALSE(ring.take());
  }
  EXPECT_EQ(seen.items.size(), 24u);
  EXPECT_EQ(*seen.wrong, 0u);
  EXPECT_EQ(executor.operations_checked(), 96u);  // copy, ready, take, release of 24 positions
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
}

TEST(Ring, ARingWithoutItsSourceIsRefusedBeforeAnyWork) {
  HostRingExecutor executor;
  const std::size_t threads = quiet_threads();
  EXPECT_THROW(Ring(RingPlan(ring_options(4)), executor, {}), std::invalid_argument);
  RingOptions o = ring_options(4);
  o.staged = false;
  EXPECT_THROW(Ring(RingPlan(o), executor, {.fill = fill_item}), std::invalid_argument);
  EXPECT_LE(settled_threads(threads), threads) << "threads left running";
  expect_nothing_held(executor);
}

TEST(Ring, AnExecutorRunsOneRingAtATimeAndServesTheNext) {
  HostRingExecutor executor;
  {
    Ring ring(RingPlan(ring_options(4)), executor, {.fill = fill_item});
    EXPECT_THROW(Ring(RingPlan(ring_options(4)), executor, {.fill = fill_item}), std::logic_error);
    EXPECT_EQ(consume(ring, executor).items, upto(4));
  }
  Ring again(RingPlan(ring_options(5)), executor, {.fill = fill_item});
  const Seen seen = consume(again, executor);
  EXPECT_EQ(seen.items, upto(5));
  EXPECT_EQ(*seen.wrong, 0u);
}

TEST(Ring, AFinishedRingLeavesNoThreadsNorMemory) {
  const std::size_t threads = quiet_threads();
  HostRingExecutor executor({.jitter_us = 50});
  {
    Ring ring(RingPlan(ring_options(10)), executor, {.fill = fill_item});
    EXPECT_EQ(executor.holdings().lane_threads, 3u);  // staging, copy, consumer
    EXPECT_EQ(executor.holdings().device_bytes, 3u * 256u);
    consume(ring, executor);
  }
  expect_nothing_held(executor);
  EXPECT_LE(settled_threads(threads), threads) << "threads left running";
}

TEST(Ring, TakeAfterStopIsRefused) {
  HostRingExecutor executor;
  Ring ring(RingPlan(ring_options(4)), executor, {.fill = fill_item});
  ASSERT_TRUE(ring.take());
  ring.stop();
  ring.stop();  // idempotent
  EXPECT_THROW(ring.take(), std::logic_error);
  EXPECT_THROW(ring.release(0), std::logic_error);
  expect_nothing_held(executor);
}

}  // namespace sluice::test

namespace sluice::test {

// A caller's item is checked before any work: a piece past its bytes is
// refused, no position is used, and the ring takes the next item as usual.
TEST(Ring, ACallersPiecePastItsItemIsRefusedBeforeAnyWork) {
  HostRingExecutor executor;
  RingOptions o;
  o.items = RingOptions::unbounded;
  o.slot_bytes = 16;
  Ring ring(RingPlan(o), executor, {.put_by_caller = true});
  Ring::Item bad{16, [](std::span<std::byte>) {}, {{nullptr, 8, 9}}};
  try {
    ring.put(bad);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("a piece of 9 bytes at offset 8 lies past the item's 16 bytes"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(ring.next_put(), 0u);
  const Ring::Item good{16, [](std::span<std::byte> slot) { fill_item(3, slot); }, {{nullptr, 0, 16}}};
  EXPECT_EQ(ring.put(good), 0u);
  ring.close();
  const auto t = ring.take();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->bytes, 16u);
  executor.host_wait({0, Step::take});
  EXPECT_EQ(wrong_bytes(t->data, 16, 3), 0u);
  EXPECT_FALSE(ring.take());
}

// An unbounded ring's slots may start with no memory (a file read's, whose
// chunks go to the caller's): an item of 0 bytes into the caller's memory
// leaves them so, and a later item of bytes gives its slot the memory it needs.
TEST(Ring, SlotsOfNoBytesGrowToTheFirstItemThatNeedsThem) {
  HostRingExecutor executor;
  RingOptions o;
  o.items = RingOptions::unbounded;
  o.slot_bytes = 0;
  Ring ring(RingPlan(o), executor, {.put_by_caller = true});
  std::vector<std::byte> callers(16, std::byte{0});
  const Ring::Item to_caller{0, [](std::span<std::byte> slot) { fill_item(5, slot); }, {{nullptr, 0, 16, callers.data()}}};
  EXPECT_EQ(ring.put(to_caller), 0u);
  const Ring::Item into_slot{24, [](std::span<std::byte> slot) { fill_item(6, slot); }, {{nullptr, 0, 24}}};
  EXPECT_EQ(ring.put(into_slot), 1u);
  ring.close();
  const auto first = ring.take();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->bytes, 0u);
  const auto second = ring.take();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->bytes, 24u);
  executor.host_wait({1, Step::take});
  EXPECT_EQ(wrong_bytes(callers.data(), 16, 5), 0u);
  EXPECT_EQ(wrong_bytes(second->data, 24, 6), 0u);
  EXPECT_FALSE(ring.take());
}

}  // namespace sluice::test
