// The ring's plan as a value: its sizes, its order, its edges, its printing,
// and the options it refuses before any work. Expected values are written
// out by hand from the rules in ring_plan.hpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "ring/ring_plan.hpp"
#include "sluice/core/ahead.hpp"

namespace sluice::test {

using namespace sluice::ring;

namespace {

RingOptions options(std::size_t items, std::size_t ahead = 2) {
  RingOptions o;
  o.items = items;
  o.ahead = ahead;
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

}  // namespace

TEST(RingPlan, SlotsComeFromAheadUnlessGiven) {
  const RingPlan plan(options(10, 2));
  EXPECT_EQ(plan.slots(), 3u);
  EXPECT_EQ(plan.staging_slots(), 3u);
  RingOptions o = options(10, 2);
  o.slots = 5;
  o.staged = false;
  const RingPlan wide(o);
  EXPECT_EQ(wide.slots(), 5u);
  EXPECT_EQ(wide.staging_slots(), 0u);
}

TEST(RingPlan, BatchesVisitEveryItemOncePerStep) {
  RingOptions o = options(3);
  o.steps = 2;
  const RingPlan plan(o);
  ASSERT_EQ(plan.positions(), 6u);
  const std::vector<std::size_t> expected{0, 1, 2, 0, 1, 2};
  for (std::size_t p = 0; p < 6; ++p) EXPECT_EQ(plan.item(p), expected[p]) << "position " << p;
  EXPECT_THROW(plan.item(6), std::out_of_range);
}

TEST(RingPlan, LayersGoForwardThenBackwardEachStep) {
  RingOptions o = options(3);
  o.order = Order::layers;
  o.steps = 2;
  const RingPlan plan(o);
  ASSERT_EQ(plan.positions(), 12u);
  const std::vector<std::size_t> expected{0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0};
  for (std::size_t p = 0; p < 12; ++p) EXPECT_EQ(plan.item(p), expected[p]) << "position " << p;
}

TEST(RingPlan, PositionsUseTheSlotsInTurn) {
  const RingPlan plan(options(8, 2));
  const std::vector<std::size_t> expected{0, 1, 2, 0, 1, 2, 0, 1};
  for (std::size_t p = 0; p < 8; ++p) {
    EXPECT_EQ(plan.device_slot(p), expected[p]);
    EXPECT_EQ(plan.op(p, Step::copy).device_slot, expected[p]);
    EXPECT_EQ(plan.op(p, Step::stage).staging_slot, expected[p]);
  }
}

TEST(RingPlan, EdgesOfAPositionInTheMiddle) {
  const RingPlan plan(options(10, 2));  // 3 slots
  EXPECT_EQ(edges(plan.op(4, Step::stage)), (std::vector<std::string>{"take 2 ahead", "copy 1 staging slot"}));
  EXPECT_EQ(edges(plan.op(4, Step::copy)), (std::vector<std::string>{"stage 4 data", "release 1 device slot"}));
  EXPECT_EQ(edges(plan.op(4, Step::ready)), (std::vector<std::string>{"copy 4 data"}));
  EXPECT_EQ(edges(plan.op(4, Step::take)), (std::vector<std::string>{"ready 4 data"}));
  EXPECT_EQ(edges(plan.op(4, Step::release)), (std::vector<std::string>{"take 4 data"}));
  EXPECT_EQ(plan.op(4, Step::stage).lane, Lane::host);
  EXPECT_EQ(plan.op(4, Step::copy).lane, Lane::copy);
  EXPECT_EQ(plan.op(4, Step::ready).lane, Lane::copy);
  EXPECT_EQ(plan.op(4, Step::take).lane, Lane::consumer);
  EXPECT_EQ(plan.op(4, Step::release).lane, Lane::consumer);
}

TEST(RingPlan, TheFirstPositionsWaitOnNoEarlierOne) {
  const RingPlan plan(options(10, 2));
  EXPECT_EQ(edges(plan.op(0, Step::stage)), std::vector<std::string>{});
  EXPECT_EQ(edges(plan.op(1, Step::stage)), std::vector<std::string>{});
  EXPECT_EQ(edges(plan.op(2, Step::stage)), (std::vector<std::string>{"take 0 ahead"}));
  EXPECT_EQ(edges(plan.op(2, Step::copy)), (std::vector<std::string>{"stage 2 data"}));
  EXPECT_EQ(edges(plan.op(3, Step::copy)), (std::vector<std::string>{"stage 3 data", "release 0 device slot"}));
}

TEST(RingPlan, AResumedPlanLeavesOutEdgesBeforeItsStart) {
  RingOptions o = options(10, 2);
  o.start = 5;
  const RingPlan plan(o);
  EXPECT_EQ(edges(plan.op(6, Step::stage)), std::vector<std::string>{});
  EXPECT_EQ(edges(plan.op(7, Step::copy)), (std::vector<std::string>{"stage 7 data"}));
  EXPECT_EQ(edges(plan.op(8, Step::copy)), (std::vector<std::string>{"stage 8 data", "release 5 device slot"}));
  EXPECT_EQ(edges(plan.op(8, Step::stage)), (std::vector<std::string>{"take 6 ahead", "copy 5 staging slot"}));
}

TEST(RingPlan, AnUnstagedPlanCopiesStraightAfterTheConsumersLead) {
  RingOptions o = options(10, 2);
  o.staged = false;
  const RingPlan plan(o);
  EXPECT_FALSE(plan.op(4, Step::stage).active);
  EXPECT_EQ(edges(plan.op(4, Step::stage)), std::vector<std::string>{});
  EXPECT_EQ(edges(plan.op(4, Step::copy)), (std::vector<std::string>{"take 2 ahead", "release 1 device slot"}));
}

TEST(RingPlan, ExplainPrintsTheSlotsAndEachOperation) {
  RingOptions o = options(4, 2);
  o.order = Order::layers;
  const RingPlan plan(o);
  const std::string text = explain(plan, 4);
  EXPECT_NE(text.find("ring: 8 positions (layers of 4 items, 1 step), from position 0"), std::string::npos) << text;
  EXPECT_NE(text.find("ahead 2, held 1, 3 device slots, 3 staging slots of 64 bytes"), std::string::npos) << text;
  EXPECT_NE(text.find("item 3 -> staging[0]"), std::string::npos) << text;  // position 3: layer 3 going back
  EXPECT_NE(text.find("after stage 3 (data), release 0 (device slot)"), std::string::npos) << text;
  EXPECT_NE(text.find("after take 1 (ahead), copy 0 (staging slot)"), std::string::npos) << text;
  EXPECT_NE(text.find("..."), std::string::npos) << text;
  EXPECT_NE(text.find("7 release"), std::string::npos) << text;  // the last position
  EXPECT_EQ(text.find("5 copy"), std::string::npos) << text;     // not shown
}

TEST(RingPlan, ExplainSaysAnUnstagedPlanIsUnstaged) {
  RingOptions o = options(2, 1);
  o.staged = false;
  const std::string text = explain(RingPlan(o));
  EXPECT_NE(text.find("unstaged"), std::string::npos) << text;
  EXPECT_NE(text.find("item 1 -> device[1]"), std::string::npos) << text;
  EXPECT_EQ(text.find(" stage "), std::string::npos) << text;
}

TEST(RingPlan, BadOptionsAreRefusedWithAReason) {
  EXPECT_NE(refusal(options(0)).find("no items"), std::string::npos);
  RingOptions o = options(4);
  o.steps = 0;
  EXPECT_NE(refusal(o).find("steps"), std::string::npos);
  EXPECT_NE(refusal(options(4, 0)).find("ahead must be at least 1"), std::string::npos);
  EXPECT_NE(refusal(options(4, most_ahead + 1)).find("ahead must be at most 30 positions"), std::string::npos);
  EXPECT_EQ(refusal(options(4, most_ahead)), "accepted");
  o = options(4, 3);
  o.slots = 3;
  EXPECT_NE(refusal(o).find("give at least 4 slots"), std::string::npos) << refusal(o);
  o = options(4);
  o.slot_bytes = 0;
  EXPECT_NE(refusal(o).find("0 bytes"), std::string::npos);
  o = options(4);
  o.start = 4;
  EXPECT_NE(refusal(o).find("start position 4 is past the last position 3"), std::string::npos) << refusal(o);
  o = options(4, 3);
  o.slots = 4;
  EXPECT_EQ(refusal(o), "accepted");
  o.held = 2;  // the consumer holds two: ahead 3 needs 5
  EXPECT_NE(refusal(o).find("the 2 the consumer holds: give at least 5 slots"), std::string::npos) << refusal(o);
  o.held = 0;
  EXPECT_NE(refusal(o).find("holds at least"), std::string::npos) << refusal(o);
  o = options(RingOptions::unbounded);
  o.steps = 2;
  EXPECT_NE(refusal(o).find("unbounded ring hands out batches, once"), std::string::npos) << refusal(o);
  // An unbounded ring's slots may start with no memory (a file read's, whose chunks go to the
  // caller's memory); a bounded ring's slots are sized once, for its largest item, and must hold one.
  o = options(RingOptions::unbounded);
  o.slot_bytes = 0;
  EXPECT_EQ(refusal(o), "accepted");
}

TEST(RingPlan, HeldPositionsAddSlotsAndDelayTheSlotsReuse) {
  RingOptions o = options(10, 2);
  o.held = 2;
  const RingPlan plan(o);
  EXPECT_EQ(plan.slots(), 4u);
  // copy 6 reuses slot 2, which position 2 holds until its release (at take 4).
  const RingOp copy = plan.op(6, Step::copy);
  EXPECT_EQ(copy.device_slot, 2u);
  EXPECT_TRUE(std::any_of(copy.begin(), copy.end(), [](const RingEdge& e) {
    return e.on == OpRef{2, Step::release} && e.why == Why::device_slot;
  }));
}

TEST(RingPlan, FewerStagingSlotsMakeAStageWaitOnANearerCopy) {
  RingOptions o = options(10, 2);
  o.staging_slots = 2;
  const RingPlan plan(o);
  EXPECT_EQ(plan.slots(), 3u);
  EXPECT_EQ(plan.staging_slots(), 2u);
  EXPECT_EQ(plan.staging_slot(5), 1u);
  EXPECT_EQ(edges(plan.op(5, Step::stage)), (std::vector<std::string>{"take 3 ahead", "copy 3 staging slot"}));
  o.staging_slots = 4;
  EXPECT_NE(refusal(o).find("4 staging slots for 3 device slots"), std::string::npos) << refusal(o);
}

TEST(RingPlan, AnUnboundedPlanHoldsItemIAtPositionI) {
  const RingPlan plan(options(RingOptions::unbounded, 2));
  EXPECT_TRUE(plan.unbounded());
  EXPECT_EQ(plan.item(12345), 12345u);
  const std::string text = explain(plan, 2);
  EXPECT_NE(text.find("batches until the producer ends"), std::string::npos) << text;
}

}  // namespace sluice::test
