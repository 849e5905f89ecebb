// The ring engine when things go wrong: a producer that throws, a copy that
// fails, a consumer that stops early or never takes, a stop while the
// producer is blocked; and what each edge guards, shown by leaving it out.
// Every case must end with nothing running and nothing held.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ring_test.hpp"

namespace sluice::test {

namespace {

// Takes until take() throws; returns the error and what was taken before it.
struct Outcome {
  Seen seen;
  std::optional<RingError> error;
};
Outcome take_until_failure(Ring& ring, HostRingExecutor& executor) {
  Outcome out;
  try {
    while (const auto t = ring.take()) {
      out.seen.positions.push_back(t->position);
      out.seen.items.push_back(t->item);
      check_on_lane(executor, *t, out.seen);
    }
  } catch (const RingError& e) {
    out.error = e;
  }
  return out;
}

bool names(const std::string& what, const std::string& part) { return what.find(part) != std::string::npos; }

}  // namespace

TEST(RingFaults, AProducerThatThrowsAtKFailsTheTakeOfK) {
  for (std::size_t k : {0u, 1u, 4u, 7u}) {
    SCOPED_TRACE("k " + std::to_string(k));
    HostRingExecutor executor({.jitter_us = 50, .seed = k});
    auto fill = [k](std::size_t item, std::span<std::byte> slot) {
      if (item == k) throw std::runtime_error("the shard is unreadable");
      fill_item(item, slot);
    };
    Outcome out;
    {
      Ring ring(RingPlan(ring_options(8, 2)), executor, {.fill = fill});
      std::vector<std::size_t> taken;
      for (;;) {
        try {
          const auto t = ring.take();
          ASSERT_TRUE(t) << "the ring ended without the failure";
          taken.push_back(t->position);
          check_on_lane(executor, *t, out.seen);
        } catch (const RingError& e) {
          out.error = e;
          break;
        }
      }
      EXPECT_EQ(taken.size(), k);  // every position before k, then take k throws
      EXPECT_THROW(ring.take(), RingError);  // and keeps throwing
    }
    ASSERT_TRUE(out.error);
    EXPECT_EQ(out.error->position(), k);
    EXPECT_EQ(out.error->item(), k);
    EXPECT_EQ(out.error->step(), Step::stage);
    const std::string what = out.error->what();
    EXPECT_TRUE(names(what, "position " + std::to_string(k) + " (item " + std::to_string(k) + ") failed at its stage"))
        << what;
    EXPECT_TRUE(names(what, "the shard is unreadable")) << what;
    EXPECT_EQ(*out.seen.wrong, 0u);
    EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
    expect_nothing_held(executor);
  }
}

TEST(RingFaults, AnInjectedStageFailureNamesItsLayer) {
  HostRingExecutor executor;
  executor.inject({{5, Step::stage}});  // layers 0 1 2 2 1 0: position 5 is layer 0 going back
  Outcome out;
  {
    Ring ring(RingPlan(ring_options(3, 2, Order::layers)), executor, {.fill = fill_item});
    out = take_until_failure(ring, executor);
  }
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->position(), 5u);
  EXPECT_EQ(out.error->item(), 0u);
  EXPECT_EQ(out.error->step(), Step::stage);
  EXPECT_EQ(out.seen.items, (std::vector<std::size_t>{0, 1, 2, 2, 1}));
  EXPECT_TRUE(names(out.error->what(), "injected")) << out.error->what();
  expect_nothing_held(executor);
}

// A copy fails as it runs on the copy lane; the consumer learns it at the
// first take that finds it (take k, or a later one that the lane's failure
// reaches first), and its lane never runs work on the failed position.
TEST(RingFaults, ACopyThatFailsAtKIsNamedAndNothingPastItIsUsed) {
  for (std::size_t k : {0u, 2u, 5u, 9u}) {
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      SCOPED_TRACE("k " + std::to_string(k) + " seed " + std::to_string(seed));
      HostRingExecutor executor({.jitter_us = 100, .seed = seed});
      executor.inject({{k, Step::copy}});
      Outcome out;
      {
        Ring ring(RingPlan(ring_options(10, 2)), executor, {.fill = fill_item});
        out = take_until_failure(ring, executor);
      }
      ASSERT_TRUE(out.error) << "no take failed";
      EXPECT_EQ(out.error->position(), k);
      EXPECT_EQ(out.error->step(), Step::copy);
      EXPECT_TRUE(names(out.error->what(), "failed at its copy")) << out.error->what();
      EXPECT_GE(out.seen.positions.size(), k);
      EXPECT_EQ(*out.seen.wrong, 0u);
      EXPECT_EQ(*out.seen.checked, k) << "the consumer's lane ran work past the failed copy";
      expect_nothing_held(executor);
    }
  }
}

TEST(RingFaults, AFaultFiresOnceAndTheExecutorServesTheNextRing) {
  HostRingExecutor executor;
  executor.inject({{1, Step::copy}});
  {
    Ring ring(RingPlan(ring_options(4)), executor, {.fill = fill_item});
    EXPECT_TRUE(take_until_failure(ring, executor).error);
  }
  Seen seen;
  {
    Ring ring(RingPlan(ring_options(4)), executor, {.fill = fill_item});
    seen = consume(ring, executor);
  }
  EXPECT_EQ(seen.items.size(), 4u);
  EXPECT_EQ(*seen.wrong, 0u);
}

TEST(RingFaults, AConsumerThatStopsAfterAnyPositionLeavesNothingRunning) {
  const std::size_t threads = quiet_threads();
  for (std::size_t k = 0; k <= 6; ++k) {
    for (bool explicit_stop : {false, true}) {
      SCOPED_TRACE("k " + std::to_string(k) + (explicit_stop ? " stop()" : " destroyed"));
      HostRingExecutor executor({.jitter_us = 100, .seed = k + 1});
      Seen seen;
      {
        Ring ring(RingPlan(ring_options(6, 2)), executor, {.fill = fill_item});
        seen = consume(ring, executor, k);
        if (explicit_stop) {
          ring.stop();
          expect_nothing_held(executor);
        }
      }
      EXPECT_EQ(seen.items.size(), std::min<std::size_t>(k, 6));
      EXPECT_EQ(*seen.checked, seen.items.size()) << "the consumer's work did not all run";
      EXPECT_EQ(*seen.wrong, 0u);
      EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
      expect_nothing_held(executor);
      EXPECT_LE(settled_threads(threads), threads) << "threads left running";
    }
  }
}

TEST(RingFaults, ARingDestroyedWithoutATakeLeavesNothingRunning) {
  const std::size_t threads = quiet_threads();
  HostRingExecutor executor({.jitter_us = 200});
  std::atomic<std::size_t> fills{0};
  {
    Ring ring(RingPlan(ring_options(100, 4)), executor,
              {.fill = [&](std::size_t item, std::span<std::byte> slot) { ++fills, fill_item(item, slot); }});
  }
  EXPECT_LE(fills.load(), 4u);
  expect_nothing_held(executor);
  EXPECT_LE(settled_threads(threads), threads) << "threads left running";
}

TEST(RingFaults, StopWhileTheProducerWaitsForTheConsumerReturns) {
  HostRingExecutor executor;
  std::atomic<std::size_t> fills{0};
  Ring ring(RingPlan(ring_options(50, 2)), executor,
            {.fill = [&](std::size_t item, std::span<std::byte> slot) { ++fills, fill_item(item, slot); }});
  ASSERT_TRUE(ring.take());
  // The producer fills positions 1 and 2, then waits for the consumer's take of 1.
  while (fills.load() < 3) std::this_thread::yield();
  within(std::chrono::seconds(10), "stop while the producer waits", [&] { ring.stop(); });
  EXPECT_EQ(fills.load(), 3u);
  expect_nothing_held(executor);
}

TEST(RingFaults, StopWhileTheProducerIsInsideAFillWaitsForItAndReturns) {
  HostRingExecutor executor;
  std::atomic<bool> inside{false}, open{false};
  Ring ring(RingPlan(ring_options(10, 2)), executor, {.fill = [&](std::size_t item, std::span<std::byte> slot) {
              if (item == 1) {
                inside = true;
                while (!open.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
              }
              fill_item(item, slot);
            }});
  while (!inside.load()) std::this_thread::yield();
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    open = true;
  });
  within(std::chrono::seconds(10), "stop while a fill runs", [&] { ring.stop(); });
  EXPECT_TRUE(open.load()) << "stop returned while the fill still ran";
  opener.join();
  expect_nothing_held(executor);
}

TEST(RingFaults, ConsumerWorkStillQueuedRunsBeforeTheRingIsGone) {
  HostRingExecutor executor;
  std::atomic<bool> done{false};
  {
    Ring ring(RingPlan(ring_options(6, 2)), executor, {.fill = fill_item});
    ASSERT_TRUE(ring.take());
    executor.on_consumer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      done = true;
    });
  }
  EXPECT_TRUE(done.load());
  expect_nothing_held(executor);
}

// What each edge guards: with it kept, a run under pressure is right; left
// out, the executor sees the plan broken. The pressure holds the consumer's
// work on the first position; with the edge left out it holds it until the
// executor has seen the plan broken, so the outcome does not hang on timing.
namespace {

struct EdgeCase {
  Seen seen;
  std::vector<std::string> violations;
};

EdgeCase run_without(std::optional<Why> left_out, bool staged = true) {
  HostRingExecutor executor;
  if (left_out)
    executor.ignore_edges([why = *left_out](const RingOp&, const RingEdge& e) { return e.why != why; });
  RingOptions o = ring_options(6, 1);  // 2 slots: position 2 reuses position 0's
  o.staged = staged;
  std::vector<std::vector<std::byte>> items(6, std::vector<std::byte>(o.slot_bytes));
  for (std::size_t i = 0; i < items.size(); ++i) fill_item(i, items[i]);
  EdgeCase out;
  within(std::chrono::seconds(30), "a ring with an edge left out", [&] {
    Ring ring(RingPlan(o), executor,
              {.fill = fill_item, .source = [&](std::size_t item) -> const std::byte* { return items[item].data(); }});
    bool first = true;
    while (const auto t = ring.take()) {
      out.seen.items.push_back(t->item);
      check_on_lane(executor, *t, out.seen, [&executor, first, hold_until_broken = left_out.has_value()] {
        if (!first) return;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        if (!hold_until_broken) return std::this_thread::sleep_for(std::chrono::milliseconds(20));
        while (executor.violations().empty() && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the overwrite lands before the second read
      });
      first = false;
    }
  });
  out.violations = executor.violations();
  return out;
}

bool any_names(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines)
    if (names(l, part)) return true;
  return false;
}

}  // namespace

TEST(RingEdges, AllKeptTheRingIsRight) {
  const EdgeCase kept = run_without(std::nullopt);
  EXPECT_EQ(kept.seen.items.size(), 6u);
  EXPECT_EQ(*kept.seen.wrong, 0u);
  EXPECT_TRUE(kept.violations.empty()) << kept.violations.front();
}

TEST(RingEdges, WithoutTheReleaseEdgeASlotIsOverwrittenWhileInUse) {
  const EdgeCase broken = run_without(Why::device_slot);
  EXPECT_TRUE(any_names(broken.violations, "(device slot)")) << (broken.violations.empty() ? "none" : broken.violations.front());
  EXPECT_TRUE(any_names(broken.violations, "device slot 0 overwritten while position 0 is not released"));
  EXPECT_GT(*broken.seen.wrong, 0u) << "the consumer read its slot untouched";
}

TEST(RingEdges, WithoutTheReleaseEdgeAnUnstagedRingBreaksToo) {
  const EdgeCase broken = run_without(Why::device_slot, false);
  EXPECT_TRUE(any_names(broken.violations, "overwritten while position 0 is not released"));
  EXPECT_GT(*broken.seen.wrong, 0u);
}

// Position 2's copy waits for position 0's release (the consumer is held on
// position 0); without the staging-slot edge position 4's stage writes the
// staging slot position 2's copy has yet to read.
TEST(RingEdges, WithoutTheStagingSlotEdgeAStagingSlotIsOverwrittenBeforeItsCopy) {
  const EdgeCase broken = run_without(Why::staging_slot);
  EXPECT_TRUE(any_names(broken.violations, "(staging slot)")) << (broken.violations.empty() ? "none" : broken.violations.front());
  EXPECT_TRUE(any_names(broken.violations, "staging slot 0 overwritten while its copy of position 2 is pending"));
  EXPECT_GT(*broken.seen.wrong, 0u) << "position 2 arrived right";
}

}  // namespace sluice::test
