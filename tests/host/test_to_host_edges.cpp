// What each edge of the ring to the host guards, one test per kind: with
// every edge kept the run is right and the executor sees no rule broken;
// with the edge left out (HostRingExecutor::ignore_edges: neither the ring's
// host waits nor the lanes wait on it) the executor sees the rule it guards
// broken, and where the wrong bytes can be made to arrive, they do. Each case
// holds one operation until the broken order has happened (and for a fixed
// while with every edge kept), so the outcome does not hang on timing.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "to_host_test.hpp"

namespace sluice::test {

namespace {

enum class Left { none, ahead, mark_data, staging_slot, ready_data };

HostRingExecutor::EdgeFilter keep_all_but(Left left) {
  return [left](const RingOp& op, const RingEdge& e) {
    switch (left) {
      case Left::none: return true;
      case Left::ahead: return e.why != Why::ahead;
      case Left::mark_data: return !(op.ref.step == Step::copy && e.on.step == Step::mark);
      case Left::staging_slot: return e.why != Why::staging_slot;
      case Left::ready_data: return !(op.ref.step == Step::drain && e.on.step == Step::ready);
    }
    return true;
  };
}

// With the edge kept the hold is a fixed pause (what it waits for cannot
// happen while it holds); left out, it holds until `broken` says the broken
// order has happened.
template <typename Broken>
void hold(bool left_out, Broken&& broken) {
  if (!left_out) return std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(wait_until(broken)) << "the broken order never happened";
}

struct EdgeRun {
  ToHostOutcome outcome;
  HostRingExecutor::Holdings after;
};

// Runs `c` with the edge `left` left out (or none), holding as `hooks` say.
template <typename MakeHooks>
EdgeRun run_without(Left left, const ToHostCase& c, MakeHooks&& make_hooks) {
  HostRingExecutor executor;
  if (left != Left::none) executor.ignore_edges(keep_all_but(left));
  const ToHostHooks hooks = make_hooks(executor, left != Left::none);
  EdgeRun run;
  within(std::chrono::seconds(30), "a ring to the host with an edge left out",
         [&] { run.outcome = run_to_host(c, executor, hooks); });
  run.after = executor.holdings();
  if (left == Left::none) expect_right(run.outcome, executor, c.start, c.items * c.steps);
  return run;
}

// ahead 1, unstaged: put 1 waits for drain 0 (its `ahead` edge), which holds.
const ToHostCase ahead_case{.items = 4, .ahead = 1, .staged = false};
ToHostHooks hold_drain_0_until_a_violation(HostRingExecutor& executor, bool left_out) {
  ToHostHooks h;
  h.hold_drain = [&executor, left_out](ToHostRing&, std::size_t p) {
    if (p == 0) hold(left_out, [&] { return !executor.violations().empty(); });
  };
  return h;
}

// The caller's work for position 0 holds before it writes the bytes; copy 0 waits for mark 0 after it.
ToHostHooks hold_work_0_until_copied(HostRingExecutor& executor, bool left_out) {
  ToHostHooks h;
  h.before_work = [&executor, left_out](ToHostRing&, std::size_t p) {
    if (p == 0) hold(left_out, [&] { return executor.copied(0); });
  };
  return h;
}

// ahead 2, one staging slot: copy 1 waits for drain 0 (its staging-slot edge), which holds between two reads.
const ToHostCase staging_case{.items = 4, .ahead = 2, .staging = 1};
ToHostHooks hold_drain_0_until_copy_1(HostRingExecutor&, bool left_out) {
  ToHostHooks h;
  h.hold_drain = [left_out](ToHostRing& ring, std::size_t p) {
    if (p == 0) hold(left_out, [&] { return ring.copied(1); });
  };
  return h;
}

// The caller's work for position 0 holds; drain 0 waits for ready 0, after copy 0, after mark 0.
ToHostHooks hold_work_0_until_drained(HostRingExecutor&, bool left_out) {
  ToHostHooks h;
  h.before_work = [left_out](ToHostRing& ring, std::size_t p) {
    if (p == 0) hold(left_out, [&] { return ring.drained() >= 1; });
  };
  return h;
}

}  // namespace

TEST(ToHostRingEdges, AllKeptEveryHeldRunIsRight) {
  // run_without(Left::none) checks each run: right bytes in order, no violation, nothing held.
  run_without(Left::none, ahead_case, hold_drain_0_until_a_violation);
  run_without(Left::none, {.items = 4, .ahead = 2}, hold_work_0_until_copied);
  run_without(Left::none, {.items = 4, .ahead = 2, .staged = false}, hold_work_0_until_copied);
  run_without(Left::none, staging_case, hold_drain_0_until_copy_1);
  run_without(Left::none, {.items = 4, .ahead = 2}, hold_work_0_until_drained);
}

// Mark i waits (through put()) for drain i - ahead: the caller's device bytes
// of `ahead` positions at most are in flight.
TEST(ToHostRingEdges, WithoutTheAheadEdgeAMarkRunsBeforeTheDrainAheadOfIt) {
  const EdgeRun kept = run_without(Left::none, ahead_case, hold_drain_0_until_a_violation);
  EXPECT_TRUE(kept.outcome.violations.empty()) << first_of(kept.outcome.violations);
  const EdgeRun broken = run_without(Left::ahead, ahead_case, hold_drain_0_until_a_violation);
  const auto& v = broken.outcome.violations;
  EXPECT_TRUE(any_names(v, "position 1 mark: starts before the drain of position 0 (ahead)")) << first_of(v);
  EXPECT_EQ(broken.after.lane_threads, 0u);
}

// Copy i waits for mark i: the caller's work has made the bytes it reads.
TEST(ToHostRingEdges, WithoutTheMarkEdgeACopyReadsTheSourceBeforeItIsMade) {
  for (bool staged : {true, false}) {
    SCOPED_TRACE(staged ? "staged" : "unstaged");
    const ToHostCase c{.items = 4, .ahead = 2, .staged = staged};
    const EdgeRun kept = run_without(Left::none, c, hold_work_0_until_copied);
    EXPECT_TRUE(kept.outcome.violations.empty()) << first_of(kept.outcome.violations);
    EXPECT_EQ(kept.outcome.wrong, 0u);
    const EdgeRun broken = run_without(Left::mark_data, c, hold_work_0_until_copied);
    const auto& v = broken.outcome.violations;
    EXPECT_TRUE(any_names(v, "position 0 copy: starts before the mark of position 0 (data)")) << first_of(v);
    EXPECT_TRUE(any_names(v, "position 0 copy: source slot 0 read before the mark of position 0 had written it"))
        << first_of(v);
    EXPECT_GT(broken.outcome.wrong, 0u) << "drain 0 found the bytes the work had not yet written";
    EXPECT_FALSE(broken.outcome.out == broken.outcome.expected);
  }
}

// Copy i waits for drain i - staging slots: the host is done reading the slot.
TEST(ToHostRingEdges, WithoutTheStagingSlotEdgeACopyOverwritesASlotBeingDrained) {
  const EdgeRun kept = run_without(Left::none, staging_case, hold_drain_0_until_copy_1);
  EXPECT_TRUE(kept.outcome.violations.empty()) << first_of(kept.outcome.violations);
  EXPECT_EQ(kept.outcome.wrong, 0u);
  const EdgeRun broken = run_without(Left::staging_slot, staging_case, hold_drain_0_until_copy_1);
  const auto& v = broken.outcome.violations;
  EXPECT_TRUE(any_names(v, "position 1 copy: staging slot 0 overwritten while the drain of position 0 is pending"))
      << first_of(v);
  EXPECT_TRUE(any_names(v, "position 1 copy: starts before the drain of position 0 (staging slot)")) << first_of(v);
  EXPECT_GT(broken.outcome.wrong, 0u) << "drain 0 read its slot untouched";
}

// Drain i waits for ready i: the copy has written the slot it reads.
TEST(ToHostRingEdges, WithoutTheReadyEdgeADrainReadsItsSlotBeforeTheCopy) {
  const ToHostCase c{.items = 4, .ahead = 2};
  const EdgeRun kept = run_without(Left::none, c, hold_work_0_until_drained);
  EXPECT_TRUE(kept.outcome.violations.empty()) << first_of(kept.outcome.violations);
  EXPECT_EQ(kept.outcome.wrong, 0u);
  const EdgeRun broken = run_without(Left::ready_data, c, hold_work_0_until_drained);
  const auto& v = broken.outcome.violations;
  EXPECT_TRUE(any_names(v, "position 0 drain: starts before the ready of position 0 (data)")) << first_of(v);
  EXPECT_TRUE(any_names(v, "position 0 drain: staging slot 0 read before the copy of position 0 had written it"))
      << first_of(v);
  EXPECT_GT(broken.outcome.wrong, 0u) << "drain 0 found its item's bytes before they were copied";
}

// Each filter leaves out the one kind of edge it names, and the ring asks the executor.
TEST(ToHostRingEdges, IgnoreEdgesLeavesOutOnlyTheKindItNames) {
  RingOptions o = to_host_options({.items = 8, .ahead = 3, .staging = 2});
  const RingPlan plan(o);
  const std::vector<std::pair<Left, std::string>> kinds{
      {Left::ahead, "mark drain ahead"},
      {Left::mark_data, "copy mark data"},
      {Left::staging_slot, "copy drain staging slot"},
      {Left::ready_data, "drain ready data"}};
  for (const auto& [left, name] : kinds) {
    HostRingExecutor executor;
    executor.ignore_edges(keep_all_but(left));
    std::vector<std::string> left_out;
    for (std::size_t p = 0; p < plan.positions(); ++p)
      for (Step s : {Step::mark, Step::copy, Step::ready, Step::drain}) {
        const RingOp op = plan.op(p, s);
        for (const RingEdge& e : op)
          if (!executor.keeps(op, e))
            left_out.push_back(std::string(to_string(s)) + " " + std::string(to_string(e.on.step)) + " " +
                               std::string(to_string(e.why)));
      }
    ASSERT_FALSE(left_out.empty()) << name;
    for (const auto& l : left_out) EXPECT_EQ(l, name);
  }
  HostRingExecutor all;
  const RingOp copy = plan.op(5, Step::copy);
  for (const RingEdge& e : copy) EXPECT_TRUE(all.keeps(copy, e));
}

// Under jitter alone, with no hold, leaving out the edge a drain waits on still shows on some seed.
TEST(ToHostRingEdges, WithoutTheReadyEdgeJitterAloneBreaksTheRing) {
  std::size_t broken_seeds = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    HostRingExecutor kept({.jitter_us = 200, .seed = seed});
    const auto right = run_to_host({.items = 8, .ahead = 2}, kept);
    EXPECT_TRUE(right.violations.empty()) << first_of(right.violations);
    EXPECT_EQ(right.wrong, 0u);
    HostRingExecutor executor({.jitter_us = 200, .seed = seed});
    executor.ignore_edges(keep_all_but(Left::ready_data));
    const auto o = run_to_host({.items = 8, .ahead = 2}, executor);
    broken_seeds += any_names(o.violations, "(data)") ? 1 : 0;
  }
  EXPECT_GT(broken_seeds, 0u) << "no seed ran a drain before its ready";
}

}  // namespace sluice::test
