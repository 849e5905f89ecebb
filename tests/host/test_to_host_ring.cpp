// The ring to the host (ring/to_host_ring.hpp) on the host executor: every
// byte the caller's work makes arrives, in order, at any lead, number of
// staging slots and item size, staged or into the caller's memory, under
// jitter; what it refuses; how a failure at each step is named and how far
// the run got; and that stopping it at any point leaves nothing running.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "to_host_test.hpp"

namespace sluice::test {

namespace {

bool names(const std::string& what, const std::string& part) { return what.find(part) != std::string::npos; }

struct DiskFull : std::runtime_error {
  DiskFull() : std::runtime_error("no space left on the disk") {}
};

std::vector<std::byte> item_bytes(std::size_t item, std::size_t n) {
  std::vector<std::byte> v(n);
  fill_item(item, v);
  return v;
}

}  // namespace

// ---- Every byte arrives

TEST(ToHostRing, EveryByteArrivesInOrderUnderJitter) {
  for (std::size_t ahead = 1; ahead <= 3; ++ahead)
    for (std::uint64_t seed = 1; seed <= 8; ++seed) {
      SCOPED_TRACE("ahead " + std::to_string(ahead) + " seed " + std::to_string(seed));
      HostRingExecutor executor({.jitter_us = 100, .seed = seed});
      const auto o = run_to_host({.items = 20, .ahead = ahead}, executor);
      expect_right(o, executor, 0, 20);
    }
}

TEST(ToHostRing, UnstagedCopiesLandInTheCallersMemory) {
  for (std::size_t ahead = 1; ahead <= 3; ++ahead)
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      SCOPED_TRACE("ahead " + std::to_string(ahead) + " seed " + std::to_string(seed));
      HostRingExecutor executor({.jitter_us = 100, .seed = seed});
      const auto o = run_to_host({.items = 16, .ahead = ahead, .staged = false}, executor);
      expect_right(o, executor, 0, 16);  // and each drain was handed no staged bytes
    }
}

TEST(ToHostRing, FewerStagingSlotsThanAhead) {
  for (auto [ahead, staging] : {std::pair<std::size_t, std::size_t>{2, 1}, {3, 1}, {3, 2}, {4, 3}})
    for (std::uint64_t seed = 1; seed <= 5; ++seed) {
      SCOPED_TRACE("ahead " + std::to_string(ahead) + " staging " + std::to_string(staging) + " seed " + std::to_string(seed));
      HostRingExecutor executor({.jitter_us = 100, .seed = seed});
      const auto o = run_to_host({.items = 18, .ahead = ahead, .staging = staging}, executor);
      expect_right(o, executor, 0, 18);
    }
}

TEST(ToHostRing, ItemsOfDifferentSizesGrowTheStagingSlots) {
  for (bool staged : {true, false})
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE(std::string(staged ? "staged" : "unstaged") + " seed " + std::to_string(seed));
      HostRingExecutor executor({.jitter_us = 60, .seed = seed});
      ToHostCase c{.items = 7, .steps = 2, .ahead = 2, .staged = staged, .slot_bytes = 8};
      c.size = [](std::size_t item) { return 1 + (item * 97) % 700; };  // 1 .. 583 bytes, mostly past the slot's 8
      std::size_t most_staged = 0;  // the staging slots' bytes, as the drains saw them
      ToHostHooks hooks;
      hooks.hold_drain = [&](ToHostRing&, std::size_t) {
        most_staged = std::max(most_staged, executor.holdings().staging_bytes);
      };
      const auto o = run_to_host(c, executor, hooks);
      expect_right(o, executor, 0, 14);
      if (staged)
        EXPECT_GE(most_staged, 583u + 8u) << "the slots did not grow for the largest item";  // and the other slot
      else
        EXPECT_EQ(most_staged, 0u) << "an unstaged ring has no staging slots";
    }
}

TEST(ToHostRing, AResumedRingPutsAndDrainsFromItsStart) {
  HostRingExecutor executor({.jitter_us = 50});
  {
    ToHostRing ring(RingPlan(to_host_options({.items = 12, .start = 5})), executor);
    EXPECT_EQ(ring.next_put(), 5u);
    EXPECT_EQ(ring.drained(), 5u);  // positions before the start never run
  }
  const auto o = run_to_host({.items = 12, .ahead = 3, .start = 5}, executor);
  expect_right(o, executor, 5, 12);
}

TEST(ToHostRing, DrainedAndCopiedTellHowFarItGot) {
  // Ahead 3: put 5 waits for drain 2, which holds; copies 3 and 4 run meanwhile.
  HostRingExecutor executor;
  std::size_t drained_while_held = 0, next_put_while_held = 0;
  bool copies_ran = false, copy_5_ran = true;
  ToHostHooks hooks;
  hooks.hold_drain = [&](ToHostRing& ring, std::size_t p) {
    if (p != 2) return;
    copies_ran = wait_until([&] { return ring.copied(3) && ring.copied(4); });
    drained_while_held = ring.drained();
    next_put_while_held = ring.next_put();
    copy_5_ran = ring.copied(5);
    for (std::size_t q = 0; q <= 4; ++q) copies_ran = copies_ran && ring.copied(q);
  };
  const auto o = run_to_host({.items = 8, .ahead = 3}, executor, hooks);
  expect_right(o, executor, 0, 8);
  EXPECT_TRUE(copies_ran) << "positions 0 to 4 were not all copied while drain 2 held";
  EXPECT_EQ(drained_while_held, 2u);
  EXPECT_EQ(next_put_while_held, 5u) << "put 5 did not wait for drain 2";
  EXPECT_FALSE(copy_5_ran);
}

TEST(ToHostRing, AnItemWithoutADrainOrBytesStillPassesItsSteps) {
  HostRingExecutor executor;
  std::vector<std::byte> device = item_bytes(1, 64), out(64);
  {
    ToHostRing ring(RingPlan(to_host_options({.items = 3, .slot_bytes = 64})), executor);
    EXPECT_EQ(ring.put({}), 0u);                                           // nothing to copy, nothing to drain
    EXPECT_EQ(ring.put({64, {{device.data(), 0, 64, out.data()}}}), 1u);  // into the caller's memory, no drain
    EXPECT_EQ(ring.put({0, {{nullptr, 0, 0}}}), 2u);                       // an empty piece
    ring.finish();
    EXPECT_EQ(ring.drained(), 3u);
    EXPECT_TRUE(ring.copied(1));
  }
  EXPECT_EQ(out, device);
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
  expect_nothing_held(executor);
}

TEST(ToHostRing, FinishWithNothingPutReturnsAtOnce) {
  HostRingExecutor executor;
  {
    ToHostRing ring(RingPlan(to_host_options({.items = 4})), executor);
    within(std::chrono::seconds(10), "finish of an empty ring", [&] { ring.finish(); });
    EXPECT_EQ(ring.drained(), 0u);
    EXPECT_THROW(ring.finish(), std::logic_error);  // the ring is stopped
  }
  EXPECT_EQ(executor.operations_checked(), 0u);
  expect_nothing_held(executor);
}

// ---- Refusals

TEST(ToHostRing, PutAfterCloseStopOrPastTheLastPositionThrowsLogicError) {
  std::vector<std::byte> device = item_bytes(0, 256);
  const ToHostRing::Item item{256, {{device.data(), 0, 256}}};
  HostRingExecutor executor;
  {
    ToHostRing ring(RingPlan(to_host_options({.items = 2})), executor);
    ring.put(item);
    ring.put(item);
    EXPECT_THROW(ring.put(item), std::logic_error);  // past the last position
    ring.finish();
  }
  {
    ToHostRing ring(RingPlan(to_host_options({.items = 4})), executor);
    ring.put(item);
    ring.close();
    EXPECT_THROW(ring.put(item), std::logic_error);
    ring.finish();
    EXPECT_EQ(ring.drained(), 1u);
  }
  {
    ToHostRing ring(RingPlan(to_host_options({.items = 4})), executor);
    ring.stop();
    EXPECT_THROW(ring.put(item), std::logic_error);
    EXPECT_THROW(ring.finish(), std::logic_error);
    ring.stop();  // idempotent
  }
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
  expect_nothing_held(executor);
}

TEST(ToHostRing, BadPiecesAreRefusedBeforeAnyWork) {
  std::vector<std::byte> device = item_bytes(0, 256), out(256);
  HostRingExecutor executor;
  {
    ToHostRing ring(RingPlan(to_host_options({.items = 4})), executor);
    EXPECT_THROW(ring.put({256, {{nullptr, 0, 16}}}), std::invalid_argument);             // no device memory
    EXPECT_THROW(ring.put({256, {{device.data(), 200, 57}}}), std::invalid_argument);     // ends past the item
    EXPECT_THROW(ring.put({256, {{device.data(), 256, 1}}}), std::invalid_argument);      // starts past it
    EXPECT_THROW(ring.put({256, {{device.data(), 0, SIZE_MAX}}}), std::invalid_argument);
    EXPECT_EQ(ring.next_put(), 0u);
    EXPECT_EQ(executor.operations_checked(), 0u);
    EXPECT_EQ(ring.put({256, {{device.data(), 200, 56}, {device.data(), 0, 200}}}), 0u);  // the refusals left no trace
    // A piece of no bytes copies nothing: it needs no memory and may lie anywhere (an empty tensor's).
    EXPECT_EQ(ring.put({256, {{nullptr, 0, 0}, {device.data(), 0, 256}, {device.data(), 999, 0}}}), 1u);
    ring.finish();
    EXPECT_EQ(ring.drained(), 2u);
  }
  {
    ToHostRing ring(RingPlan(to_host_options({.items = 4, .staged = false})), executor);
    EXPECT_THROW(ring.put({256, {{device.data(), 0, 256}}}), std::invalid_argument);  // unstaged: nowhere to go
    EXPECT_THROW(ring.put({0, {{nullptr, 0, 8, out.data()}}}), std::invalid_argument);
    EXPECT_EQ(ring.next_put(), 0u);
    EXPECT_EQ(ring.put({0, {{nullptr, 0, 0}, {device.data(), 0, 256, out.data()}}}), 0u);
    ring.finish();
  }
  EXPECT_EQ(out, device);
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
  expect_nothing_held(executor);
}

TEST(ToHostRing, APlanToTheDeviceIsRefused) {
  HostRingExecutor executor;
  RingOptions o = to_host_options({.items = 4});
  o.direction = Direction::to_device;
  try {
    ToHostRing ring(RingPlan(o), executor);
    ADD_FAILURE() << "a plan to the device was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(names(e.what(), "needs a plan to the host")) << e.what();
  }
  EXPECT_EQ(executor.holdings().lane_threads, 0u);  // refused before the executor made anything
  // The executor is free for a ring to the host.
  const auto out = run_to_host({.items = 3}, executor);
  expect_right(out, executor, 0, 3);
}

// ---- Failures

TEST(ToHostRing, AnInjectedCopyFaultIsNamedAndStopsTheRing) {
  for (std::size_t k : {0u, 3u, 7u})
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      SCOPED_TRACE("k " + std::to_string(k) + " seed " + std::to_string(seed));
      HostRingExecutor executor({.jitter_us = 80, .seed = seed});
      executor.inject({{k, Step::copy}});
      const auto o = run_to_host({.items = 10, .ahead = 2}, executor);
      // put(k + 2) waits for drain k, which fails: that put, at the latest, throws.
      ASSERT_TRUE(o.put_error) << "every put returned";
      EXPECT_EQ(o.put_error->position(), k);
      EXPECT_EQ(o.put_error->step(), Step::copy);
      EXPECT_LE(o.put, k + 2);
      ASSERT_TRUE(o.finish_error) << "finish returned";
      EXPECT_EQ(o.finish_error->position(), k);
      EXPECT_EQ(o.finish_error->item(), k);
      EXPECT_EQ(o.finish_error->step(), Step::copy);
      const std::string what = o.finish_error->what();
      EXPECT_TRUE(names(what, "position " + std::to_string(k) + " (item " + std::to_string(k) + ") failed at its copy")) << what;
      EXPECT_TRUE(names(what, "injected")) << what;
      EXPECT_EQ(o.drained, k);
      EXPECT_EQ(o.drained_positions, positions_from(0, k));  // no drain ran on a failed copy
      EXPECT_EQ(o.wrong, 0u);
      EXPECT_TRUE(o.violations.empty()) << first_of(o.violations);
      expect_nothing_held(executor);
    }
}

TEST(ToHostRing, AnInjectedDrainFaultIsNamed) {
  for (std::size_t k : {0u, 4u, 9u}) {
    SCOPED_TRACE("k " + std::to_string(k));
    HostRingExecutor executor({.jitter_us = 50, .seed = k + 1});
    executor.inject({{k, Step::drain}});
    const auto o = run_to_host({.items = 10, .ahead = 2}, executor);
    ASSERT_TRUE(o.finish_error) << "finish returned";
    EXPECT_EQ(o.finish_error->position(), k);
    EXPECT_EQ(o.finish_error->step(), Step::drain);
    EXPECT_TRUE(names(o.finish_error->what(), "failed at its drain")) << o.finish_error->what();
    EXPECT_TRUE(names(o.finish_error->what(), "injected")) << o.finish_error->what();
    if (o.put_error) {
      EXPECT_EQ(o.put_error->position(), k);
    }
    EXPECT_EQ(o.drained, k);
    EXPECT_EQ(o.drained_positions, positions_from(0, k));
    EXPECT_TRUE(o.violations.empty()) << first_of(o.violations);
    expect_nothing_held(executor);
  }
}

TEST(ToHostRing, ADrainThatThrowsIsTheErrorsCause) {
  for (bool staged : {true, false}) {
    SCOPED_TRACE(staged ? "staged" : "unstaged");
    HostRingExecutor executor({.jitter_us = 50});
    ToHostHooks hooks;
    hooks.enter_drain = [](std::size_t p) {
      if (p == 5) throw DiskFull();
    };
    const auto o = run_to_host({.items = 12, .ahead = 3, .staged = staged}, executor, hooks);
    ASSERT_TRUE(o.put_error) << "put 8 waits for drain 5: it throws";
    EXPECT_EQ(o.put_error->position(), 5u);
    ASSERT_TRUE(o.finish_error);
    EXPECT_EQ(o.finish_error->position(), 5u);
    EXPECT_EQ(o.finish_error->step(), Step::drain);
    EXPECT_TRUE(names(o.finish_error->what(), "position 5 (item 5) failed at its drain: no space left on the disk"))
        << o.finish_error->what();
    ASSERT_TRUE(o.finish_error->cause());
    EXPECT_THROW(std::rethrow_exception(o.finish_error->cause()), DiskFull);
    EXPECT_EQ(o.drained, 5u);
    EXPECT_EQ(o.drained_positions, positions_from(0, 5));
    EXPECT_EQ(o.wrong, 0u);
    EXPECT_TRUE(o.violations.empty()) << first_of(o.violations);
    expect_nothing_held(executor);
  }
}

TEST(ToHostRing, AnInjectedMarkFaultIsNamed) {
  HostRingExecutor executor({.jitter_us = 50});
  executor.inject({{3, Step::mark}});
  const auto o = run_to_host({.items = 8, .ahead = 2}, executor);
  ASSERT_TRUE(o.finish_error);
  EXPECT_EQ(o.finish_error->position(), 3u);
  EXPECT_EQ(o.finish_error->step(), Step::mark);
  EXPECT_EQ(o.drained, 3u);
  EXPECT_EQ(o.drained_positions, positions_from(0, 3));
  EXPECT_TRUE(o.violations.empty()) << first_of(o.violations);
  expect_nothing_held(executor);
}

TEST(ToHostRing, AFailedRingKeepsThrowingAndAFaultFiresOnce) {
  HostRingExecutor executor;
  executor.inject({{1, Step::copy}});
  std::vector<std::byte> device = item_bytes(0, 256);
  const ToHostRing::Item item{256, {{device.data(), 0, 256}}};
  {
    ToHostRing ring(RingPlan(to_host_options({.items = 10, .ahead = 1})), executor);
    ring.put(item);
    ring.put(item);
    EXPECT_THROW(ring.put(item), RingError);  // waits for drain 1, which fails
    EXPECT_THROW(ring.put(item), RingError);  // and again, before finish
    EXPECT_EQ(ring.next_put(), 2u);
    EXPECT_THROW(ring.finish(), RingError);
    EXPECT_EQ(ring.drained(), 1u);
  }
  expect_nothing_held(executor);
  const auto o = run_to_host({.items = 10, .ahead = 1}, executor);
  expect_right(o, executor, 0, 10);
}

// A copy refused as put() enqueues it: that put throws the executor's own
// error, later ones the RingError, and finish() waits for the positions put
// before it to drain before it throws.
TEST(ToHostRing, AFailureInsidePutStillDrainsWhatWasPutBeforeIt) {
  HostRingExecutor host;
  CopyRefusingExecutor executor(host, 3);
  std::vector<std::byte> device = item_bytes(0, 256);
  std::atomic<bool> finishing{false};
  std::atomic<std::size_t> drains{0};
  ToHostRing ring(RingPlan(to_host_options({.items = 10, .ahead = 4})), executor);
  ring.put({256, {{device.data(), 0, 256}}, [&](std::span<const std::byte>) {
              wait_until([&] { return finishing.load(); });  // drains 1 and 2 are left when finish() begins
              std::this_thread::sleep_for(std::chrono::milliseconds(20));
              ++drains;
            }});
  const ToHostRing::Item item{256, {{device.data(), 0, 256}}, [&](std::span<const std::byte>) { ++drains; }};
  ring.put(item);
  ring.put(item);
  try {
    ring.put(item);
    ADD_FAILURE() << "put 3 returned";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "the copy was refused");
  }
  EXPECT_THROW(ring.put(item), RingError);
  EXPECT_EQ(ring.next_put(), 3u);
  finishing = true;
  try {
    ring.finish();
    ADD_FAILURE() << "finish returned";
  } catch (const RingError& e) {
    EXPECT_EQ(e.position(), 3u);
    EXPECT_EQ(e.step(), Step::copy);
    EXPECT_TRUE(names(e.what(), "the copy was refused")) << e.what();
    ASSERT_TRUE(e.cause());
  }
  EXPECT_EQ(ring.drained(), 3u) << "finish() stopped before the positions put were drained";
  EXPECT_EQ(drains.load(), 3u);
  EXPECT_TRUE(host.violations().empty()) << first_violation(host);
  expect_nothing_held(host);
}

// ---- Waiting for one position

TEST(ToHostRing, WaitDrainedWaitsForOnePositionOrAFailureAtOrBeforeIt) {
  std::vector<std::byte> device = item_bytes(0, 256);
  HostRingExecutor executor({.jitter_us = 100});
  executor.inject({{4, Step::drain}});
  std::atomic<std::size_t> drains{0};
  const ToHostRing::Item item{256, {{device.data(), 0, 256}}, [&](std::span<const std::byte>) { ++drains; }};
  {
    ToHostRing ring(RingPlan(to_host_options({.items = 10, .ahead = 3})), executor);
    EXPECT_THROW(ring.wait_drained(0), std::logic_error);  // not put
    for (int i = 0; i < 5; ++i) ring.put(item);  // put 5 could already find drain 4 failed
    ring.wait_drained(2);
    EXPECT_GE(ring.drained(), 3u);
    EXPECT_GE(drains.load(), 3u);
    ring.wait_drained(3);  // the failure past it leaves it to be drained
    EXPECT_GE(ring.drained(), 4u);
    try {
      ring.wait_drained(4);
      ADD_FAILURE() << "the failed position 4 was waited for as drained";
    } catch (const RingError& e) {
      EXPECT_EQ(e.position(), 4u);
      EXPECT_EQ(e.step(), Step::drain);
    }
    EXPECT_EQ(ring.drained(), 4u);
    EXPECT_THROW(ring.finish(), RingError);
  }
  EXPECT_EQ(drains.load(), 4u);
  expect_nothing_held(executor);
}

TEST(ToHostRing, WaitDrainedGivesUpOnceTheRingIsStopped) {
  std::vector<std::byte> device = item_bytes(0, 256);
  HostRingExecutor executor;
  std::atomic<bool> in_drain{false}, waiter_returned{false};
  ToHostRing ring(RingPlan(to_host_options({.items = 4, .ahead = 2})), executor);
  // Drain 0 holds until the waiter for position 1 has given up: only stop() can end its wait.
  ring.put({256, {{device.data(), 0, 256}}, [&](std::span<const std::byte>) {
              in_drain = true;
              wait_until([&] { return waiter_returned.load(); });
            }});
  ring.put({256, {{device.data(), 0, 256}}});
  std::exception_ptr thrown;
  std::thread waiter([&] {
    try {
      ring.wait_drained(1);
    } catch (...) {
      thrown = std::current_exception();
    }
    waiter_returned = true;
  });
  ASSERT_TRUE(wait_until([&] { return in_drain.load(); }));
  within(std::chrono::seconds(20), "stop while a caller waits for a drain", [&] { ring.stop(); });
  waiter.join();
  ASSERT_TRUE(thrown) << "wait_drained(1) returned, but position 1 was never drained";
  EXPECT_THROW(std::rethrow_exception(thrown), std::logic_error);
  EXPECT_EQ(ring.drained(), 1u);
  expect_nothing_held(executor);
}

// ---- Stopping

TEST(ToHostRing, StopWhileAPutWaitsForItsLeadReturns) {
  HostRingExecutor executor;
  std::vector<std::byte> device = item_bytes(0, 256);
  std::atomic<bool> in_drain{false}, put_returned{false};
  ToHostRing ring(RingPlan(to_host_options({.items = 10, .ahead = 1})), executor);
  // Drain 0 holds until put 1 has returned: put 1 waits for it, and can only give up.
  ring.put({256, {{device.data(), 0, 256}}, [&](std::span<const std::byte>) {
              in_drain = true;
              wait_until([&] { return put_returned.load(); });
            }});
  std::exception_ptr thrown;
  std::thread putter([&] {
    try {
      ring.put({256, {{device.data(), 0, 256}}});
    } catch (...) {
      thrown = std::current_exception();
    }
    put_returned = true;
  });
  ASSERT_TRUE(wait_until([&] { return in_drain.load(); }));
  within(std::chrono::seconds(20), "stop while a put waits for its lead", [&] { ring.stop(); });
  putter.join();
  ASSERT_TRUE(thrown) << "put 1 went past drain 0";
  EXPECT_THROW(std::rethrow_exception(thrown), std::logic_error);
  EXPECT_EQ(ring.next_put(), 1u);
  expect_nothing_held(executor);
}

TEST(ToHostRing, ARingStoppedOrDestroyedAtAnyPointLeavesNothingRunning) {
  const std::size_t threads = quiet_threads();
  std::vector<std::byte> device = item_bytes(0, 256);
  for (std::size_t k = 0; k <= 6; ++k)
    for (bool explicit_stop : {false, true}) {
      SCOPED_TRACE("k " + std::to_string(k) + (explicit_stop ? " stop()" : " destroyed"));
      HostRingExecutor executor({.jitter_us = 100, .seed = k + 1});
      std::atomic<std::size_t> drains{0};
      within(std::chrono::seconds(20), "a ring left without finish", [&] {
        ToHostRing ring(RingPlan(to_host_options({.items = 6, .ahead = 2})), executor);
        for (std::size_t p = 0; p < std::min<std::size_t>(k, 6); ++p)
          ring.put({256, {{device.data(), 0, 256}}, [&](std::span<const std::byte>) { ++drains; }});
        if (explicit_stop) {
          ring.stop();
          expect_nothing_held(executor);
          EXPECT_THROW(ring.put({}), std::logic_error);
        }
      });
      EXPECT_LE(drains.load(), std::min<std::size_t>(k, 6));
      EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
      expect_nothing_held(executor);
      EXPECT_LE(settled_threads(threads), threads) << "threads left running";
    }
}

}  // namespace sluice::test
