// The ring's plan to the host (RingOptions::direction = to_host) as a value:
// its slots, the edges of each operation, the options it refuses, its
// printing, and its form in the engine's plan format, checked statically with
// every edge and with each kind of edge left out. Expected values are written
// out by hand from the rules at the top of ring_plan.hpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/plan_check.hpp"
#include "ring/ring_engine_plan.hpp"
#include "ring/ring_plan.hpp"
#include "sluice/core/ahead.hpp"

namespace sluice::test {

using namespace sluice::ring;
using engine::Violation;

namespace {

RingOptions to_host(std::size_t items, std::size_t ahead = 2, std::size_t staging = 0, bool staged = true) {
  RingOptions o;
  o.items = items;
  o.direction = Direction::to_host;
  o.ahead = ahead;
  o.staging_slots = staging;
  o.staged = staged;
  o.slot_bytes = 64;
  return o;
}

std::vector<std::string> edges(const RingOp& op) {
  std::vector<std::string> out;
  for (const RingEdge& e : op)
    out.push_back(std::string(to_string(e.on.step)) + " " + std::to_string(e.on.position) + " " + std::string(to_string(e.why)));
  return out;
}

std::string refusal(const RingOptions& o) {
  try {
    RingPlan plan(o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<std::string> described(const engine::Plan& plan, const std::vector<Violation>& found) {
  std::vector<std::string> out;
  for (const Violation& v : found) out.push_back(plan.describe(v));
  return out;
}

bool any_has(const std::vector<std::string>& lines, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return has(l, part); });
}

std::string first(const std::vector<std::string>& lines) { return lines.empty() ? "none" : lines.front(); }

engine::KeepEdge without(Why why) {
  return [why](const engine::Op&, const engine::Edge& e) { return e.why != static_cast<std::uint8_t>(why); };
}

// Leaves out the edges of one step that wait on another step, of one reason.
engine::KeepEdge without(const RingEnginePlan& form, Step of, Step on, Why why) {
  return [&form, of, on, why](const engine::Op& op, const engine::Edge& e) {
    return !(form.ref(op.key).step == of && form.ref(e.on).step == on && e.why == static_cast<std::uint8_t>(why));
  };
}

constexpr auto source_ring = static_cast<std::uint8_t>(SlotRing::source);
constexpr auto staging_ring = static_cast<std::uint8_t>(SlotRing::staging);

// Violations of one kind on one ring.
std::size_t count(const std::vector<Violation>& found, Violation::Kind kind, std::uint8_t ring) {
  return static_cast<std::size_t>(
      std::count_if(found.begin(), found.end(), [&](const Violation& v) { return v.kind == kind && v.use.ring == ring; }));
}

}  // namespace

// ---- The plan as a value

TEST(ToHostPlan, StagingSlotsComeFromAheadAndThereAreNoDeviceSlots) {
  const RingPlan plan(to_host(10, 3));
  EXPECT_TRUE(plan.to_host());
  EXPECT_EQ(plan.direction(), Direction::to_host);
  EXPECT_EQ(plan.slots(), 0u);
  EXPECT_EQ(plan.staging_slots(), 3u);
  EXPECT_EQ(plan.positions(), 10u);
  EXPECT_EQ(RingPlan(to_host(10, 3, 2)).staging_slots(), 2u);
  EXPECT_EQ(RingPlan(to_host(10, 3, 0, false)).staging_slots(), 0u);
  EXPECT_FALSE(RingPlan(to_host(10, 3, 0, false)).staged());
  RingOptions device = to_host(10, 3);
  device.direction = Direction::to_device;
  EXPECT_FALSE(RingPlan(device).to_host());
  EXPECT_EQ(RingPlan(device).slots(), 4u);  // ahead + held: the direction is what gave none above
}

TEST(ToHostPlan, PositionsUseTheSourcesAndStagingSlotsInTurn) {
  const RingPlan plan(to_host(9, 3, 2));
  for (std::size_t p = 0; p < 9; ++p) {
    SCOPED_TRACE("position " + std::to_string(p));
    EXPECT_EQ(plan.item(p), p);
    EXPECT_EQ(plan.source_slot(p), p % 3);
    EXPECT_EQ(plan.staging_slot(p), p % 2);
    for (Step s : {Step::mark, Step::copy, Step::ready, Step::drain}) {
      const RingOp op = plan.op(p, s);
      EXPECT_TRUE(op.active);
      EXPECT_EQ(op.source_slot, p % 3);
      EXPECT_EQ(op.staging_slot, p % 2);
      EXPECT_EQ(op.device_slot, 0u);
    }
  }
  EXPECT_THROW(plan.op(9, Step::mark), std::out_of_range);
}

TEST(ToHostPlan, EdgesAndLanesOfAPositionInTheMiddle) {
  const RingPlan plan(to_host(10, 2));  // 2 staging slots
  EXPECT_EQ(edges(plan.op(4, Step::mark)), (std::vector<std::string>{"drain 2 ahead"}));
  EXPECT_EQ(edges(plan.op(4, Step::copy)), (std::vector<std::string>{"mark 4 data", "drain 2 staging slot"}));
  EXPECT_EQ(edges(plan.op(4, Step::ready)), (std::vector<std::string>{"copy 4 data"}));
  EXPECT_EQ(edges(plan.op(4, Step::drain)), (std::vector<std::string>{"ready 4 data"}));
  EXPECT_EQ(plan.op(4, Step::mark).lane, Lane::consumer);
  EXPECT_EQ(plan.op(4, Step::copy).lane, Lane::copy);
  EXPECT_EQ(plan.op(4, Step::ready).lane, Lane::copy);
  EXPECT_EQ(plan.op(4, Step::drain).lane, Lane::host);
}

TEST(ToHostPlan, FewerStagingSlotsMakeACopyWaitOnANearerDrain) {
  const RingPlan plan(to_host(10, 3, 1));
  EXPECT_EQ(edges(plan.op(5, Step::mark)), (std::vector<std::string>{"drain 2 ahead"}));
  EXPECT_EQ(edges(plan.op(5, Step::copy)), (std::vector<std::string>{"mark 5 data", "drain 4 staging slot"}));
  const RingPlan two(to_host(10, 4, 2));
  EXPECT_EQ(edges(two.op(7, Step::mark)), (std::vector<std::string>{"drain 3 ahead"}));
  EXPECT_EQ(edges(two.op(7, Step::copy)), (std::vector<std::string>{"mark 7 data", "drain 5 staging slot"}));
}

TEST(ToHostPlan, AnUnstagedCopyWaitsOnlyForItsMark) {
  const RingPlan plan(to_host(10, 2, 0, false));
  EXPECT_EQ(edges(plan.op(4, Step::mark)), (std::vector<std::string>{"drain 2 ahead"}));
  EXPECT_EQ(edges(plan.op(4, Step::copy)), (std::vector<std::string>{"mark 4 data"}));
  EXPECT_EQ(edges(plan.op(4, Step::ready)), (std::vector<std::string>{"copy 4 data"}));
  EXPECT_EQ(edges(plan.op(4, Step::drain)), (std::vector<std::string>{"ready 4 data"}));
}

TEST(ToHostPlan, TheFirstPositionsWaitOnNoEarlierOne) {
  const RingPlan plan(to_host(10, 2, 1));
  EXPECT_EQ(edges(plan.op(0, Step::mark)), std::vector<std::string>{});
  EXPECT_EQ(edges(plan.op(1, Step::mark)), std::vector<std::string>{});
  EXPECT_EQ(edges(plan.op(2, Step::mark)), (std::vector<std::string>{"drain 0 ahead"}));
  EXPECT_EQ(edges(plan.op(0, Step::copy)), (std::vector<std::string>{"mark 0 data"}));
  EXPECT_EQ(edges(plan.op(1, Step::copy)), (std::vector<std::string>{"mark 1 data", "drain 0 staging slot"}));
  EXPECT_EQ(edges(plan.op(0, Step::drain)), (std::vector<std::string>{"ready 0 data"}));
}

TEST(ToHostPlan, AResumedPlanLeavesOutEdgesBeforeItsStart) {
  RingOptions o = to_host(10, 2);
  o.start = 5;
  const RingPlan plan(o);
  EXPECT_EQ(plan.start(), 5u);
  EXPECT_EQ(edges(plan.op(5, Step::mark)), std::vector<std::string>{});
  EXPECT_EQ(edges(plan.op(6, Step::mark)), std::vector<std::string>{});
  EXPECT_EQ(edges(plan.op(7, Step::mark)), (std::vector<std::string>{"drain 5 ahead"}));
  EXPECT_EQ(edges(plan.op(6, Step::copy)), (std::vector<std::string>{"mark 6 data"}));
  EXPECT_EQ(edges(plan.op(7, Step::copy)), (std::vector<std::string>{"mark 7 data", "drain 5 staging slot"}));
  EXPECT_EQ(edges(plan.op(5, Step::drain)), (std::vector<std::string>{"ready 5 data"}));
}

TEST(ToHostPlan, StepsOfTheOtherDirectionDoNothing) {
  const RingPlan plan(to_host(6, 2));
  for (Step s : {Step::stage, Step::transform, Step::take, Step::release}) {
    const RingOp op = plan.op(4, s);
    EXPECT_FALSE(op.active) << to_string(s);
    EXPECT_EQ(op.edge_count, 0u) << to_string(s);
    EXPECT_FALSE(in_direction(s, Direction::to_host)) << to_string(s);
  }
  RingOptions o = to_host(6, 2);
  o.direction = Direction::to_device;
  const RingPlan device(o);
  for (Step s : {Step::mark, Step::drain}) {
    EXPECT_FALSE(device.op(4, s).active) << to_string(s);
    EXPECT_EQ(device.op(4, s).edge_count, 0u) << to_string(s);
    EXPECT_FALSE(in_direction(s, Direction::to_device)) << to_string(s);
    EXPECT_TRUE(in_direction(s, Direction::to_host)) << to_string(s);
  }
  for (Step s : {Step::copy, Step::ready}) {
    EXPECT_TRUE(in_direction(s, Direction::to_host));
    EXPECT_TRUE(in_direction(s, Direction::to_device));
  }
  EXPECT_EQ(step_count, 8u);
  EXPECT_EQ(to_string(Step::mark), "mark");
  EXPECT_EQ(to_string(Step::drain), "drain");
}

// ---- Refusals

TEST(ToHostPlan, RefusesDeviceSlots) {
  RingOptions o = to_host(4, 2);
  o.slots = 3;
  const std::string why = refusal(o);
  EXPECT_TRUE(has(why, "a ring to the host has no device slots")) << why;
}

TEST(ToHostPlan, RefusesATransform) {
  RingOptions o = to_host(4, 2);
  o.out_bytes = 16;
  const std::string why = refusal(o);
  EXPECT_TRUE(has(why, "a ring to the host has no transform")) << why;
}

TEST(ToHostPlan, RefusesAnOrderOfLayers) {
  RingOptions o = to_host(4, 2);
  o.order = Order::layers;
  const std::string why = refusal(o);
  EXPECT_TRUE(has(why, "carries items in the order they are made")) << why;
}

TEST(ToHostPlan, RefusesMoreStagingSlotsThanAhead) {
  const std::string why = refusal(to_host(4, 2, 3));
  EXPECT_TRUE(has(why, "3 staging slots for ahead 2: at most 2 positions are in flight")) << why;
  EXPECT_EQ(refusal(to_host(4, 2, 2)), "accepted");
  EXPECT_EQ(refusal(to_host(4, 2, 1)), "accepted");
  // Unstaged, there are no staging slots to count.
  EXPECT_EQ(refusal(to_host(4, 1, 0, false)), "accepted");
}

TEST(ToHostPlan, RefusesWhatEveryRingRefuses) {
  EXPECT_TRUE(has(refusal(to_host(0)), "no items"));
  EXPECT_TRUE(has(refusal(to_host(4, 0)), "ahead must be at least 1"));
  EXPECT_TRUE(has(refusal(to_host(4, most_ahead + 1)), "ahead must be at most 30 positions")) << refusal(to_host(4, 31));
  EXPECT_EQ(refusal(to_host(4, most_ahead)), "accepted");
  RingOptions o = to_host(4);
  o.slot_bytes = 0;
  EXPECT_TRUE(has(refusal(o), "0 bytes")) << refusal(o);
  o = to_host(4);
  o.start = 4;
  EXPECT_TRUE(has(refusal(o), "start position 4 is past the last position 3")) << refusal(o);
  o = to_host(4);
  o.steps = 0;
  EXPECT_TRUE(has(refusal(o), "steps")) << refusal(o);
  o = to_host(RingOptions::unbounded);
  o.steps = 2;
  EXPECT_TRUE(has(refusal(o), "unbounded ring hands out batches, once")) << refusal(o);
}

// ---- explain()

TEST(ToHostPlan, ExplainSaysTheDirectionAndEachOperation) {
  const std::string text = explain(RingPlan(to_host(8, 2, 1)), 3);
  EXPECT_TRUE(has(text, "ring: 8 positions (batches of 8 items, 1 step), from position 0")) << text;
  EXPECT_TRUE(has(text, "to the host: ahead 2, 1 staging slots of 64 bytes")) << text;
  EXPECT_FALSE(has(text, "device slots")) << text;
  EXPECT_TRUE(has(text, "item 2 -> source[0]")) << text;
  EXPECT_TRUE(has(text, "source[1] -> staging[0]")) << text;
  EXPECT_TRUE(has(text, "after drain 0 (ahead)")) << text;
  EXPECT_TRUE(has(text, "after mark 1 (data), drain 0 (staging slot)")) << text;
  EXPECT_TRUE(has(text, "after ready 2 (data)")) << text;
  EXPECT_TRUE(has(text, "7 drain")) << text;     // the last position
  EXPECT_FALSE(has(text, "5 mark")) << text;     // not shown
  EXPECT_FALSE(has(text, " take ")) << text;     // no step of the other direction
  EXPECT_FALSE(has(text, " stage ")) << text;
  // A position's operations in the order it passes them.
  EXPECT_LT(text.find("1 mark"), text.find("1 copy")) << text;
  EXPECT_LT(text.find("1 copy"), text.find("1 ready")) << text;
  EXPECT_LT(text.find("1 ready"), text.find("1 drain")) << text;
  EXPECT_EQ(to_string(Direction::to_host), "to the host");
  EXPECT_EQ(to_string(Direction::to_device), "to the device");
}

TEST(ToHostPlan, ExplainSaysAnUnstagedPlanCopiesIntoTheCallersMemory) {
  const std::string text = explain(RingPlan(to_host(2, 1, 0, false)));
  EXPECT_TRUE(has(text, "to the host: ahead 1, unstaged")) << text;
  EXPECT_TRUE(has(text, "source[0] -> the caller's memory after mark 0 (data)")) << text;  // a wide place, then its edges
  EXPECT_FALSE(has(text, "staging[")) << text;
}

// ---- In the engine's form

TEST(ToHostPlan, TheEngineFormUsesSourcesAndStagingSlots) {
  const RingPlan plan(to_host(8, 3, 2));
  const RingEnginePlan form(plan);
  EXPECT_EQ(form.ring_size(source_ring), 3u);
  EXPECT_EQ(form.ring_size(staging_ring), 2u);
  EXPECT_EQ(form.ring_size(static_cast<std::uint8_t>(SlotRing::device)), 0u);
  EXPECT_EQ(form.ring_name(source_ring), "source");
  const engine::Op mark = form.op(form.key({4, Step::mark}));
  ASSERT_EQ(mark.slots.size(), 1u);
  EXPECT_EQ(mark.slots[0].ring, source_ring);
  EXPECT_EQ(mark.slots[0].slot, 1u);
  EXPECT_EQ(mark.slots[0].access, engine::Access::write);
  ASSERT_EQ(mark.edges.size(), 1u);
  EXPECT_EQ(mark.edges[0].until, engine::Until::finished);  // the caller's bytes are free once the drain has run
  EXPECT_EQ(form.ref(mark.edges[0].on), (OpRef{1, Step::drain}));
  const engine::Op copy = form.op(form.key({4, Step::copy}));
  ASSERT_EQ(copy.slots.size(), 2u);
  EXPECT_EQ(copy.slots[0].ring, source_ring);
  EXPECT_EQ(copy.slots[0].access, engine::Access::read);
  EXPECT_EQ(copy.slots[1].ring, staging_ring);
  EXPECT_EQ(copy.slots[1].slot, 0u);
  EXPECT_EQ(copy.slots[1].access, engine::Access::write);
  const engine::Op drain = form.op(form.key({4, Step::drain}));
  ASSERT_EQ(drain.slots.size(), 1u);
  EXPECT_EQ(drain.slots[0].ring, staging_ring);
  EXPECT_EQ(drain.slots[0].access, engine::Access::read);
  EXPECT_EQ(form.name(form.key({4, Step::mark})), "position 4 mark");
  EXPECT_EQ(form.name(form.key({4, Step::drain})), "position 4 drain");
}

TEST(ToHostPlan, EveryShapeKeepsTheRules) {
  for (std::size_t ahead = 1; ahead <= 4; ++ahead)
    for (std::size_t staging = 0; staging <= ahead; ++staging)  // 0: unstaged
      for (std::size_t start : {0u, 3u}) {
        SCOPED_TRACE("ahead " + std::to_string(ahead) + " staging " + std::to_string(staging) + " start " +
                     std::to_string(start));
        RingOptions o = to_host(11, ahead, staging, staging > 0);
        o.start = start;
        const RingPlan plan(o);
        const RingEnginePlan form(plan);
        const auto found = described(form, engine::check(form));
        EXPECT_TRUE(found.empty()) << first(found) << "\n" << explain(plan);
      }
  const RingPlan open(to_host(RingOptions::unbounded, 3, 2));
  EXPECT_THROW(engine::check(RingEnginePlan(open)), std::invalid_argument);
  EXPECT_TRUE(engine::check(RingEnginePlan(open), {}, 40).empty());
}

TEST(ToHostPlan, WithoutTheStagingSlotEdgeACopyMayOverwriteADrainsSlot) {
  const RingPlan plan(to_host(8, 3, 2));
  const RingEnginePlan form(plan);
  const auto found = engine::check(form, without(Why::staging_slot));
  EXPECT_GT(count(found, Violation::Kind::may_overwrite, staging_ring), 0u) << first(described(form, found));
  EXPECT_EQ(count(found, Violation::Kind::may_overwrite, staging_ring), found.size()) << first(described(form, found));
  EXPECT_TRUE(any_has(described(form, found), "position 2 copy may overwrite staging slot 0 while position 0 drain still uses it"))
      << first(described(form, found));
  // With a staging slot per position in flight, the mark's `ahead` edge waits on the same drain.
  const RingPlan full(to_host(8, 3, 3));
  const RingEnginePlan full_form(full);
  EXPECT_TRUE(engine::check(full_form, without(Why::staging_slot)).empty());
}

TEST(ToHostPlan, WithoutTheMarkEdgeACopyMayReadTheSourceBeforeItIsMade) {
  for (bool staged : {true, false}) {
    SCOPED_TRACE(staged ? "staged" : "unstaged");
    const RingPlan plan(to_host(6, 2, 0, staged));
    const RingEnginePlan form(plan);
    const auto found = engine::check(form, without(form, Step::copy, Step::mark, Why::data));
    EXPECT_EQ(count(found, Violation::Kind::may_read_early, source_ring), 6u) << first(described(form, found));
    EXPECT_TRUE(any_has(described(form, found), "position 0 copy may read source slot 0 before position 0 mark has written it"))
        << first(described(form, found));
  }
}

TEST(ToHostPlan, WithoutTheAheadEdgeAMarkMayOverwriteASourceBeingCopied) {
  for (bool staged : {true, false}) {
    SCOPED_TRACE(staged ? "staged" : "unstaged");
    const RingPlan plan(to_host(6, 2, 0, staged));
    const RingEnginePlan form(plan);
    const auto found = engine::check(form, without(Why::ahead));
    EXPECT_EQ(count(found, Violation::Kind::may_overwrite, source_ring), 4u) << first(described(form, found));
    EXPECT_EQ(found.size(), 4u) << first(described(form, found));
    EXPECT_TRUE(any_has(described(form, found), "position 2 mark may overwrite source slot 0 while position 0 copy still uses it"))
        << first(described(form, found));
  }
}

TEST(ToHostPlan, WithoutTheReadyEdgeADrainMayReadItsSlotBeforeTheCopy) {
  const RingPlan plan(to_host(6, 2));
  const RingEnginePlan form(plan);
  const auto found = engine::check(form, without(form, Step::drain, Step::ready, Why::data));
  EXPECT_EQ(count(found, Violation::Kind::may_read_early, staging_ring), 6u) << first(described(form, found));
  EXPECT_TRUE(any_has(described(form, found), "position 0 drain may read staging slot 0 before position 0 copy has written it"))
      << first(described(form, found));
  // And the `ahead` edge, on a drain no longer after its copy, no longer frees the copy's source.
  EXPECT_EQ(count(found, Violation::Kind::may_overwrite, source_ring), 4u);
  EXPECT_TRUE(any_has(described(form, found), "position 2 mark may overwrite source slot 0 while position 0 copy still uses it"));
  EXPECT_EQ(found.size(), 10u) << first(described(form, found));
}

TEST(ToHostPlan, RunTimeChecksSayWhatTheSourceAndStagingSlotsHold) {
  const RingPlan plan(to_host(8, 2, 1));
  const RingEnginePlan form(plan);
  std::map<std::size_t, engine::Progress> runs;  // by OpRef::index()
  const engine::ProgressOf progress = [&](engine::OpKey k) {
    const auto at = runs.find(form.ref(k).index());
    return at == runs.end() ? engine::Progress::none : at->second;
  };
  auto set = [&](OpRef ref, engine::Progress p) { runs[ref.index()] = p; };
  auto start = [&](OpRef ref) {
    std::vector<Violation> found;
    engine::check_start(form, form.op(form.key(ref)), progress, found);
    return described(form, found);
  };
  // Position 0 marked, its copy not run: its drain reads too early, position 2's mark overwrites its source.
  set({0, Step::mark}, engine::Progress::done);
  set({0, Step::copy}, engine::Progress::started);
  auto found = start({0, Step::drain});
  EXPECT_TRUE(any_has(found, "position 0 drain: starts before the ready of position 0 (data)")) << first(found);
  EXPECT_TRUE(any_has(found, "position 0 drain: staging slot 0 read before the copy of position 0 had written it")) << first(found);
  set({0, Step::drain}, engine::Progress::done);
  found = start({2, Step::mark});
  EXPECT_TRUE(any_has(found, "position 2 mark: source slot 0 overwritten while its copy of position 0 is pending")) << first(found);
  // Position 1's copy before its mark, and into the slot whose drain (position 0's) is still running.
  set({0, Step::copy}, engine::Progress::done);
  set({0, Step::drain}, engine::Progress::started);
  found = start({1, Step::copy});
  EXPECT_TRUE(any_has(found, "position 1 copy: starts before the mark of position 1 (data)")) << first(found);
  EXPECT_TRUE(any_has(found, "position 1 copy: source slot 1 read before the mark of position 1 had written it")) << first(found);
  EXPECT_TRUE(any_has(found, "position 1 copy: staging slot 0 overwritten while the drain of position 0 is pending")) << first(found);
  // Everything it waits on done: nothing to say.
  set({1, Step::mark}, engine::Progress::done);
  set({0, Step::drain}, engine::Progress::done);
  EXPECT_TRUE(start({1, Step::copy}).empty()) << first(start({1, Step::copy}));
}

}  // namespace sluice::test
