// The engine's plan format and its one checker (engine/plan_check.hpp): the
// three rules on a plan written by hand, the checks as operations start, and
// both domains' plans in the engine's form (a pipeline's schedule, a ring's
// plan) holding the rules, with each kind of edge shown to guard one.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "engine/plan_check.hpp"
#include "pipeline/schedule/schedule_plan.hpp"
#include "ring/ring_engine_plan.hpp"

namespace sluice::test {

using engine::Access;
using engine::Edge;
using engine::Op;
using engine::OpKey;
using engine::Progress;
using engine::Until;
using engine::Violation;

namespace {

// Groups that each write a slot of one ring (step 0) and then read it
// (step 1): the read waits on the write (why 0), the write on the previous
// group's read of the slot (why 1), unless the test leaves either out or
// turns it around.
class WriteRead final : public engine::Plan {
 public:
  std::size_t slots = 2, count = 6;
  bool data_edge = true, slot_edge = true;
  bool lane_order = false;  // writes in one lane, reads in another, each in group order
  bool one_lane = false;    // every operation in one lane: write g, read g, write g + 1, ...
  bool backwards = false, off_slot = false;

  std::uint8_t steps() const override { return 2; }
  std::size_t groups() const override { return count; }
  std::size_t ring_size(std::uint8_t) const override { return slots; }
  Op op(OpKey k) const override {
    Op op;
    op.key = k;
    op.lane = k.step;
    const std::size_t g = k.group;
    if (k.step == 0) {
      op.slots.push({0, off_slot && g == 1 ? 0 : g % slots, Access::write});
      if (slot_edge && g >= slots) op.edges.push({{g - slots, 1}, 1, Until::finished});
      if (backwards && g == 1) op.edges.push({{g, 1}, 0, Until::finished});
    } else {
      op.slots.push({0, g % slots, Access::read});
      if (data_edge) op.edges.push({{g, 0}, 0, Until::finished});
    }
    if (lane_order && g > 0) op.after = OpKey{g - 1, k.step};
    if (one_lane && (g > 0 || k.step == 1)) op.after = k.step == 1 ? OpKey{g, 0} : OpKey{g - 1, 1};
    return op;
  }
  std::string name(OpKey k) const override { return (k.step == 0 ? "write " : "read ") + std::to_string(k.group); }
  std::string ring_name(std::uint8_t) const override { return "buffer"; }
  std::string why_name(std::uint8_t why) const override { return why == 0 ? "data" : "slot"; }
};

std::vector<std::string> described(const engine::Plan& plan, const std::vector<Violation>& found) {
  std::vector<std::string> out;
  for (const Violation& v : found) out.push_back(plan.describe(v));
  return out;
}

bool any_has(const std::vector<std::string>& lines, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(part) != std::string::npos; });
}

}  // namespace

TEST(EnginePlan, APlanThatKeepsTheRulesChecksClean) {
  const WriteRead plan;
  EXPECT_TRUE(engine::check(plan).empty()) << described(plan, engine::check(plan)).front();
}

TEST(EnginePlan, WithoutTheDataEdgeAReadMayComeFirst) {
  WriteRead plan;
  plan.data_edge = false;
  const auto found = engine::check(plan);
  const auto early = std::count_if(found.begin(), found.end(),
                                   [](const Violation& v) { return v.kind == Violation::Kind::may_read_early; });
  EXPECT_EQ(static_cast<std::size_t>(early), plan.count);  // every read
  EXPECT_EQ(plan.describe(found.front()), "read 0 may read buffer slot 0 before write 0 has written it");
  // And the slot edge, on a read no longer after its write, no longer orders the write before the next one.
  EXPECT_EQ(found.size() - early, plan.count - plan.slots);
}

TEST(EnginePlan, WithoutTheSlotEdgeAWriteMayOverwrite) {
  WriteRead plan;
  plan.slot_edge = false;
  const auto found = described(plan, engine::check(plan));
  // Every group past the first ring of slots overwrites its predecessor's write and read.
  EXPECT_EQ(found.size(), 2 * (plan.count - plan.slots));
  EXPECT_TRUE(any_has(found, "write 2 may overwrite buffer slot 0 while read 0 still uses it"));
}

TEST(EnginePlan, LaneOrderCountsAsAPathWhereTheLaneRunsInOrder) {
  WriteRead plan;
  plan.slot_edge = plan.data_edge = false;
  const std::size_t without = engine::check(plan).size();
  plan.one_lane = true;  // one lane in order orders everything: no edge is needed
  EXPECT_TRUE(engine::check(plan).empty());
  plan.one_lane = false;
  plan.lane_order = true;  // a write lane and a read lane: a write never waits on a read, but
  const std::size_t two_lanes = engine::check(plan).size();
  EXPECT_LT(two_lanes, without);  // a write of g now follows the write of g - size
  EXPECT_EQ(two_lanes, plan.count + (plan.count - plan.slots));  // every read, every read's slot reused
}

TEST(EnginePlan, AFilterLeavesEdgesOutOfTheStaticCheck) {
  const WriteRead plan;
  const auto found = engine::check(plan, [](const Op&, const Edge& e) { return e.why != 1; });
  EXPECT_FALSE(found.empty());
  for (const Violation& v : found) EXPECT_EQ(v.kind, Violation::Kind::may_overwrite);
}

TEST(EnginePlan, EdgesThatDoNotPointBackAndSlotsNotTheGroupsAreFaults) {
  WriteRead plan;
  plan.backwards = true;
  EXPECT_TRUE(any_has(described(plan, engine::check(plan)), "write 1 waits on read 1, which does not come before it"));
  plan.backwards = false;
  plan.off_slot = true;
  EXPECT_TRUE(any_has(described(plan, engine::check(plan)), "write 1 uses buffer slot 0, not its own group's"));
}

TEST(EnginePlan, ThePlanIsCheckedOnlyAsFarAsAsked) {
  WriteRead plan;
  plan.data_edge = false;
  EXPECT_EQ(engine::check(plan, {}, 2).size(), 2u);
}

// ---- As operations start

namespace {

struct Runs {
  std::map<std::pair<std::size_t, int>, Progress> at;
  engine::ProgressOf view() const {
    return [this](OpKey k) {
      const auto it = at.find({k.group, k.step});
      return it == at.end() ? Progress::none : it->second;
    };
  }
};

}  // namespace

TEST(EnginePlanStart, AnOperationWhoseEdgesAndSlotsAreSettledPasses) {
  const WriteRead plan;
  Runs runs;
  for (std::size_t g = 0; g < 2; ++g) runs.at[{g, 0}] = runs.at[{g, 1}] = Progress::done;
  runs.at[{1, 1}] = Progress::failed;  // a failed operation is settled: nothing of it is still running
  std::vector<Violation> found;
  engine::check_start(plan, plan.op({2, 0}), runs.view(), found);
  engine::check_start(plan, plan.op({1, 1}), runs.view(), found);
  EXPECT_TRUE(found.empty()) << plan.describe(found.front());
}

TEST(EnginePlanStart, StartingBeforeAnEdgeHasFinishedIsAViolation) {
  const WriteRead plan;
  Runs runs;
  runs.at[{0, 0}] = Progress::started;
  std::vector<Violation> found;
  engine::check_start(plan, plan.op({0, 1}), runs.view(), found);
  ASSERT_EQ(found.size(), 2u);  // its edge, and the write of the slot it reads
  EXPECT_EQ(plan.describe(found[0]), "read 0 started before write 0 had finished (data)");
  EXPECT_EQ(plan.describe(found[1]), "read 0 read buffer slot 0 before write 0 had written it");
}

TEST(EnginePlanStart, OverwritingASlotStillInUseIsAViolationEvenWithoutTheEdge) {
  WriteRead plan;
  plan.slot_edge = false;
  Runs runs;
  runs.at[{0, 0}] = Progress::done;
  runs.at[{0, 1}] = Progress::started;
  std::vector<Violation> found;
  engine::check_start(plan, plan.op({2, 0}), runs.view(), found);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(plan.describe(found[0]), "write 2 wrote buffer slot 0 while read 0 still used its previous contents");
}

namespace {

// Three operations in a row, each waiting on the one before until it is
// `until`; with `one_slot`, each writes the one slot its predecessor used.
class Chain final : public engine::Plan {
 public:
  Until until = Until::submitted;
  bool one_slot = false;
  std::uint8_t steps() const override { return 1; }
  std::size_t groups() const override { return 3; }
  std::size_t ring_size(std::uint8_t) const override { return one_slot ? 1 : 0; }
  Op op(OpKey k) const override {
    Op op;
    op.key = k;
    if (one_slot) op.slots.push({0, 0, Access::write});
    if (k.group >= 1) op.edges.push({{k.group - 1, 0}, 0, until});
    return op;
  }
  std::string name(OpKey k) const override { return "op " + std::to_string(k.group); }
  std::string ring_name(std::uint8_t) const override { return "one"; }
  std::string why_name(std::uint8_t) const override { return "ahead"; }
};

}  // namespace

TEST(EnginePlanStart, AnEdgeUntilSubmittedNeedsOnlyTheSubmission) {
  const Chain plan;
  Runs runs;
  std::vector<Violation> found;
  engine::check_start(plan, plan.op({1, 0}), runs.view(), found);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(plan.describe(found[0]), "op 1 started before op 0 was submitted (ahead)");
  found.clear();
  runs.at[{0, 0}] = Progress::submitted;
  engine::check_start(plan, plan.op({1, 0}), runs.view(), found);
  EXPECT_TRUE(found.empty());
}

TEST(EnginePlan, AnEdgeUntilSubmittedOrdersNothingThatRuns) {
  Chain plan;
  plan.one_slot = true;
  plan.until = Until::finished;
  EXPECT_TRUE(engine::check(plan).empty());
  plan.until = Until::submitted;
  const auto found = described(plan, engine::check(plan));
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0], "op 1 may overwrite one slot 0 while op 0 still uses it");
}

TEST(EnginePlan, APlanWithNoEndIsCheckedOnlyAsFarAsAsked) {
  const ring::RingPlan open(ring::RingOptions{.items = ring::RingOptions::unbounded});
  EXPECT_THROW(engine::check(ring::RingEnginePlan(open)), std::invalid_argument);
  EXPECT_TRUE(engine::check(ring::RingEnginePlan(open), {}, 40).empty());
}

// ---- A pipeline's schedule in the engine's form

namespace {

Schedule schedule_of(HostPath path, std::size_t chunks, std::size_t depth, unsigned streams) {
  ScheduleInput in;
  in.spans = {{SpanRole::input, path, 4}, {SpanRole::output, path, 4}};
  in.plan = ChunkPlan(chunks * 100, 100);
  in.depth = depth;
  in.compute_streams = streams;
  return Schedule(in);
}

}  // namespace

TEST(EngineSchedulePlan, EveryOperationKeepsItsEdgesSlotsAndLaneOrder) {
  for (HostPath path : {HostPath::direct, HostPath::staged}) {
    const Schedule s = schedule_of(path, 9, 3, 2);
    const detail::SchedulePlan plan(s);
    EXPECT_EQ(plan.groups(), 9u);
    for (std::size_t c = 0; c < s.chunk_count(); ++c)
      for (std::uint8_t st = 0; st < stage_count; ++st) {
        const sluice::Op op = s.op(c, static_cast<Stage>(st));
        const Op e = plan.op({c, st});
        ASSERT_EQ(e.edges.size(), op.waits.size());
        for (std::size_t i = 0; i < op.waits.size(); ++i) {
          EXPECT_EQ(detail::SchedulePlan::ref(e.edges[i].on), op.waits[i].on);
          EXPECT_EQ(e.edges[i].why, static_cast<std::uint8_t>(op.waits[i].why));
        }
        ASSERT_EQ(e.slots.size(), op.slots.size());
        for (std::size_t i = 0; i < op.slots.size(); ++i) {
          EXPECT_EQ(e.slots[i].ring, static_cast<std::uint8_t>(op.slots[i].ring));
          EXPECT_EQ(e.slots[i].slot, op.slots[i].slot);
          EXPECT_EQ(engine::reads(e.slots[i].access), sluice::reads(op.slots[i].access));
          EXPECT_EQ(engine::writes(e.slots[i].access), sluice::writes(op.slots[i].access));
        }
        const auto stage = static_cast<Stage>(st);
        if (stage == Stage::stage_in || (stage == Stage::compute && c < 2) || (stage != Stage::compute && c == 0))
          EXPECT_FALSE(e.after.has_value()) << plan.name(e.key);
        else
          EXPECT_EQ(*e.after, (OpKey{c - (stage == Stage::compute ? 2 : 1), st})) << plan.name(e.key);
      }
  }
}

TEST(EngineSchedulePlan, RunTimeMessagesNameTheChunk) {
  const Schedule s = schedule_of(HostPath::direct, 4, 2, 1);
  const detail::SchedulePlan plan(s);
  Runs none;
  std::vector<Violation> found;
  engine::check_start(plan, plan.op({2, static_cast<std::uint8_t>(Stage::h2d)}), none.view(), found);
  EXPECT_TRUE(any_has(described(plan, found), "h2d of chunk 2 started before d2h of chunk 0 had finished (device slot)"));
  EXPECT_TRUE(any_has(described(plan, found), "h2d of chunk 2 wrote device slot 0 while h2d of chunk 0 still used its previous contents"));
}

// ---- A ring's plan in the engine's form

namespace {

using ring::RingEnginePlan;
using ring::RingOptions;
using ring::RingPlan;
using ring::Why;

RingOptions ring_options(std::size_t items, std::size_t ahead, std::size_t held, bool staged, bool transform) {
  RingOptions o;
  o.items = items;
  o.slot_bytes = 64;
  o.ahead = ahead;
  o.held = held;
  o.staged = staged;
  o.out_bytes = transform ? 32 : 0;
  return o;
}

engine::KeepEdge without(Why why) {
  return [why](const Op&, const Edge& e) { return e.why != static_cast<std::uint8_t>(why); };
}

}  // namespace

TEST(EngineRingPlan, EveryRingShapeKeepsTheRules) {
  for (bool staged : {true, false})
    for (bool transform : {false, true})
      for (std::size_t ahead : {1, 2, 3})
        for (std::size_t held : {1, 2}) {
          RingOptions o = ring_options(7, ahead, held, staged, transform);
          o.steps = 2;
          const RingPlan plan(o);
          const RingEnginePlan form(plan);
          const auto found = engine::check(form);
          EXPECT_TRUE(found.empty()) << form.describe(found.front()) << "\n" << ring::explain(plan);
        }
}

TEST(EngineRingPlan, ALayersRingAResumedOneAndFewStagingSlotsKeepTheRules) {
  RingOptions layers = ring_options(4, 2, 1, true, false);
  layers.order = ring::Order::layers;
  layers.staging_slots = 2;
  layers.start = 5;
  const RingPlan plan(layers);
  const RingEnginePlan form(plan);
  EXPECT_EQ(form.first_group(), 5u);
  EXPECT_TRUE(engine::check(form).empty());
  RingOptions unbounded = ring_options(RingOptions::unbounded, 2, 1, true, false);
  const RingPlan open(unbounded);
  EXPECT_TRUE(engine::check(RingEnginePlan(open), {}, 50).empty());
}

TEST(EngineRingPlan, WithoutTheReleaseEdgeADeviceSlotMayBeOverwritten) {
  for (bool staged : {true, false}) {
    const RingPlan plan(ring_options(8, 2, 1, staged, false));
    const RingEnginePlan form(plan);
    const auto found = described(form, engine::check(form, without(Why::device_slot)));
    EXPECT_TRUE(any_has(found, "position 3 copy may overwrite device slot 0 while position 0 release still uses it"))
        << (found.empty() ? "none" : found.front());
  }
}

TEST(EngineRingPlan, WithoutTheStagingSlotEdgeAStagingSlotMayBeOverwritten) {
  RingOptions o = ring_options(8, 2, 1, true, false);
  o.staging_slots = 2;
  const RingPlan plan(o);
  const RingEnginePlan form(plan);
  const auto found = described(form, engine::check(form, without(Why::staging_slot)));
  EXPECT_TRUE(any_has(found, "position 2 stage may overwrite staging slot 0 while position 0 copy still uses it"))
      << (found.empty() ? "none" : found.front());
}

TEST(EngineRingPlan, WithoutTheDataEdgesAReadMayComeBeforeItsWrite) {
  const RingPlan plan(ring_options(6, 2, 1, true, true));
  const RingEnginePlan form(plan);
  const auto found = described(form, engine::check(form, without(Why::data)));
  EXPECT_TRUE(any_has(found, "position 0 copy may read staging slot 0 before position 0 stage has written it"));
  EXPECT_TRUE(any_has(found, "position 0 take may read device slot 0 before position 0 copy has written it"));
}

TEST(EngineRingPlan, WithoutReadysEdgeOnTheTransformTheConsumerMayReadItsOutputUnwritten) {
  const RingPlan plan(ring_options(6, 2, 1, true, true));
  const RingEnginePlan form(plan);
  const auto ready = static_cast<std::uint8_t>(ring::Step::ready);
  const auto transform = static_cast<std::uint8_t>(ring::Step::transform);
  // The transform may run beside the copy lane: lane order does not put ready after it.
  const auto found = described(form, engine::check(form, [&](const Op& op, const Edge& e) {
    return !(op.key.step == ready && e.on.step == transform);
  }));
  EXPECT_TRUE(any_has(found, "position 0 take may read device slot 0 before position 0 transform has written it"))
      << (found.empty() ? "none" : found.front());
}

TEST(EngineRingPlan, TheAheadEdgeWaitsOnlyForTheSubmission) {
  const RingPlan plan(ring_options(8, 2, 1, true, false));
  const RingEnginePlan form(plan);
  const Op stage = form.op({4, static_cast<std::uint8_t>(ring::Step::stage)});
  ASSERT_EQ(stage.edges.size(), 2u);
  EXPECT_EQ(stage.edges[0].until, Until::submitted);
  EXPECT_EQ(stage.edges[1].until, Until::finished);
}

TEST(EngineRingPlan, RunTimeMessagesSayWhatTheRingsSlotsHold) {
  RingOptions o = ring_options(8, 2, 1, true, false);
  o.staging_slots = 2;
  const RingPlan plan(o);
  const RingEnginePlan form(plan);
  Runs runs;
  for (std::uint8_t st = 0; st < ring::step_count; ++st) runs.at[{0, st}] = Progress::done;
  constexpr auto stage = static_cast<std::uint8_t>(ring::Step::stage);
  constexpr auto copy = static_cast<std::uint8_t>(ring::Step::copy);
  constexpr auto release = static_cast<std::uint8_t>(ring::Step::release);
  runs.at[{2, stage}] = Progress::done;
  std::vector<Violation> found;
  engine::check_start(form, form.op({4, stage}), runs.view(), found);
  EXPECT_TRUE(any_has(described(form, found), "position 4 stage: staging slot 0 overwritten while its copy of position 2 is pending"));
  found.clear();
  runs.at[{0, release}] = Progress::started;
  engine::check_start(form, form.op({3, copy}), runs.view(), found);
  EXPECT_TRUE(any_has(described(form, found), "position 3 copy: device slot 0 overwritten while position 0 is not released"));
  EXPECT_TRUE(any_has(described(form, found), "position 3 copy: starts before the release of position 0 (device slot)"));
}

// Any ring shape keeps the rules, and loses them without its release edge
// once it runs past its device slots.
RC_GTEST_PROP(EngineRingPlanProperties, AnyRingKeepsTheRulesAndTheReleaseEdgeGuardsItsSlots, ()) {
  const std::size_t ahead = *rc::gen::inRange<std::size_t>(1, 5);
  const std::size_t held = *rc::gen::inRange<std::size_t>(1, 4);
  RingOptions o = ring_options(*rc::gen::inRange<std::size_t>(1, 12), ahead, held, *rc::gen::arbitrary<bool>(),
                               *rc::gen::arbitrary<bool>());
  o.slots = ahead + held + *rc::gen::inRange<std::size_t>(0, 3);
  if (o.staged) o.staging_slots = *rc::gen::inRange<std::size_t>(0, o.slots + 1);
  o.steps = *rc::gen::inRange<std::size_t>(1, 3);
  o.order = *rc::gen::arbitrary<bool>() ? ring::Order::layers : ring::Order::batches;
  const RingPlan probe(o);
  o.start = *rc::gen::inRange<std::size_t>(0, probe.positions());
  const RingPlan plan(o);
  const RingEnginePlan form(plan);
  RC_ASSERT(engine::check(form).empty());
  if (plan.positions() - plan.start() > plan.slots())
    RC_ASSERT(!engine::check(form, without(Why::device_slot)).empty());
}

}  // namespace sluice::test
