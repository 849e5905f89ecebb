// The schedule: its rules, its invariants over random shapes, and what each
// edge guards (a schedule with an edge left out fails its check).
#include "sluice/pipeline/schedule.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>

#include "sluice/measure/model.hpp"

using sluice::Edge;
using sluice::HostPath;
using sluice::Op;
using sluice::OpRef;
using sluice::Reason;
using sluice::Ring;
using sluice::Schedule;
using sluice::SpanRole;
using sluice::SpanShape;
using sluice::Stage;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

Schedule copy_schedule(std::size_t chunks, std::size_t depth, HostPath path, std::size_t chunk_items = 1000) {
  sluice::ScheduleInput in;
  in.spans = {{SpanRole::input, path, 4}, {SpanRole::output, path, 4}};
  in.plan = sluice::ChunkPlan(chunks * chunk_items, chunk_items);
  in.depth = depth;
  return Schedule(in);
}

bool waits_on(const Op& op, OpRef on, Reason why) {
  return std::any_of(op.waits.begin(), op.waits.end(), [&](const Edge& e) { return e.on == on && e.why == why; });
}

// A filter that leaves out every edge of one kind.
sluice::EdgeFilter without(Reason why) {
  return [why](const Op&, const Edge& e) { return e.why != why; };
}

}  // namespace

TEST(Schedule, RingsAreTheSizesThePlanGives) {
  const Schedule direct = copy_schedule(10, 4, HostPath::direct);
  EXPECT_EQ(direct.ring_size(Ring::device), 4u);
  EXPECT_EQ(direct.ring_size(Ring::pinned_in), 0u);  // nothing passes through the host
  EXPECT_EQ(direct.ring_size(Ring::pinned_out), 0u);
  EXPECT_EQ(direct.ring_size(Ring::event_set), 32u);  // never fewer than 32
  EXPECT_EQ(copy_schedule(10, 16, HostPath::direct).ring_size(Ring::event_set), 36u);  // 2 x depth + 4
  const Schedule staged = copy_schedule(10, 3, HostPath::staged);
  EXPECT_EQ(staged.ring_size(Ring::pinned_out), 4u);  // depth + 1: D2H may run that far ahead of the drain
  // Stage-in keeps about 24 MiB ahead of the H2D copies, in 3 to 6 slots.
  auto in_slots = [](std::size_t chunk_bytes) {
    return copy_schedule(4, 4, HostPath::staged, chunk_bytes / 4).ring_size(Ring::pinned_in);
  };
  EXPECT_EQ(in_slots(4 * MiB), 6u);
  EXPECT_EQ(in_slots(8 * MiB), 3u);
  EXPECT_EQ(in_slots(5 * MiB), 4u);   // 20 MiB: the lead rounds down
  EXPECT_EQ(in_slots(16 * MiB), 3u);  // never fewer than filling, ready, copying
  EXPECT_EQ(in_slots(MiB), 6u);       // nor more than six
}

TEST(Schedule, EachOperationWaitsOnWhatItNeeds) {
  const Schedule s = copy_schedule(40, 4, HostPath::staged);
  const std::size_t in = s.ring_size(Ring::pinned_in), out = s.ring_size(Ring::pinned_out),
                    events = s.ring_size(Ring::event_set);
  const std::size_t c = 39;
  EXPECT_TRUE(waits_on(s.op(c, Stage::stage_in), {c - in, Stage::h2d}, Reason::pinned_in_slot));
  EXPECT_TRUE(waits_on(s.op(c, Stage::h2d), {c, Stage::stage_in}, Reason::data));
  EXPECT_TRUE(waits_on(s.op(c, Stage::h2d), {c - 4, Stage::d2h}, Reason::device_slot));
  EXPECT_TRUE(waits_on(s.op(c, Stage::h2d), {c - events, Stage::stage_out}, Reason::event_set));
  EXPECT_TRUE(waits_on(s.op(c, Stage::compute), {c, Stage::h2d}, Reason::data));
  EXPECT_TRUE(waits_on(s.op(c, Stage::d2h), {c, Stage::compute}, Reason::data));
  EXPECT_TRUE(waits_on(s.op(c, Stage::d2h), {c - out, Stage::stage_out}, Reason::pinned_out_slot));
  EXPECT_TRUE(waits_on(s.op(c, Stage::stage_out), {c, Stage::d2h}, Reason::data));
  // The first chunks have no earlier user of their slots.
  EXPECT_EQ(s.op(0, Stage::h2d).waits.size(), 1u);  // only its stage-in
  EXPECT_EQ(s.op(0, Stage::h2d).slots.size(), 3u);  // reads pinned-in[0], writes device[0], records events[0]
  EXPECT_EQ(s.op(5, Stage::h2d).slots[1].slot, 1u);  // device slot 5 % 4
}

TEST(Schedule, DirectCopiesRunAheadOfTheKernelsStagedOnesDoNot) {
  const Schedule direct = copy_schedule(10, 4, HostPath::direct);
  EXPECT_EQ(direct.last_h2d_with(0), 3u);  // depth - 1 ahead
  EXPECT_EQ(direct.last_h2d_with(8), 9u);  // never past the last chunk
  const auto order = direct.submission_order();
  ASSERT_GE(order.size(), 5u);
  EXPECT_EQ(order[3], (OpRef{3, Stage::h2d}));
  EXPECT_EQ(order[4], (OpRef{0, Stage::compute}));
  EXPECT_EQ(copy_schedule(10, 4, HostPath::staged).last_h2d_with(2), 2u);
  EXPECT_FALSE(direct.op(3, Stage::stage_in).active);
}

TEST(Schedule, RefusesWhatCannotBeScheduled) {
  sluice::ScheduleInput in;
  EXPECT_THROW(Schedule{in}, std::invalid_argument);  // no spans
  in.spans = {{SpanRole::input, HostPath::direct, 4}};
  in.depth = 0;
  EXPECT_THROW(Schedule{in}, std::invalid_argument);
  in.depth = 2;
  in.spans[0].item_bytes = 0;
  EXPECT_THROW(Schedule{in}, std::invalid_argument);
}

TEST(ScheduleCheck, TheDefaultsHold) {
  for (HostPath path : {HostPath::direct, HostPath::staged})
    for (std::size_t depth : {1u, 2u, 4u, 8u}) {
      const Schedule s = copy_schedule(50, depth, path);
      EXPECT_EQ(sluice::check(s), std::vector<std::string>{}) << to_string(path) << ", depth " << depth;
    }
}

// Each kind of edge guards a slot: without it, some operation may overwrite
// memory, or events, whose previous contents are still in use.
TEST(ScheduleCheck, EveryKindOfEdgeIsNeeded) {
  const Schedule s = copy_schedule(60, 3, HostPath::staged);
  for (Reason why : {Reason::data, Reason::pinned_in_slot, Reason::device_slot, Reason::pinned_out_slot}) {
    const auto faults = sluice::check(s, without(why));
    EXPECT_FALSE(faults.empty()) << "without " << to_string(why) << " edges";
  }
  // Staged outputs free the event sets too (the D2H waits for the drain's
  // stage-out a few chunks back); with none, only the event-set edges do.
  EXPECT_TRUE(sluice::check(s, without(Reason::event_set)).empty());
  EXPECT_FALSE(sluice::check(copy_schedule(60, 3, HostPath::direct), without(Reason::event_set)).empty());
  const auto faults = sluice::check(s, without(Reason::device_slot));
  ASSERT_FALSE(faults.empty());
  EXPECT_NE(faults.front().find("may overwrite device slot"), std::string::npos) << faults.front();
}

TEST(ScheduleExplain, ListsRingsAndOperations) {
  const std::string text = sluice::explain(copy_schedule(20, 4, HostPath::staged), 2);
  EXPECT_NE(text.find("20 chunks"), std::string::npos) << text;
  EXPECT_NE(text.find("pinned-in 6"), std::string::npos) << text;
  EXPECT_NE(text.find("h2d"), std::string::npos);
  EXPECT_NE(text.find("h2d                  reads pinned-in[1] writes device[3] writes events[19]; after stage-in 19 (data), "
                      "d2h 15 (device slot)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("chunk 19"), std::string::npos);  // the last chunk too
  EXPECT_NE(text.find("..."), std::string::npos);
}

// ---------------------------------------------------------------------------
// Invariants over random shapes: any mix of spans, sizes, chunk plans,
// depths and compute streams.

namespace {

rc::Gen<SpanShape> span_shape() {
  return rc::gen::build<SpanShape>(
      rc::gen::set(&SpanShape::role, rc::gen::element(SpanRole::input, SpanRole::output, SpanRole::inout)),
      rc::gen::set(&SpanShape::path, rc::gen::element(HostPath::direct, HostPath::staged, HostPath::source, HostPath::sink)),
      rc::gen::set(&SpanShape::item_bytes, rc::gen::element<std::size_t>(1, 2, 4, 8, 12, 48)));
}

// Sources are inputs and sinks outputs, as a pipeline's spans are.
SpanShape fixed_up(SpanShape s) {
  if (s.path == HostPath::source) s.role = SpanRole::input;
  if (s.path == HostPath::sink) s.role = SpanRole::output;
  return s;
}

Schedule random_schedule() {
  auto spans = *rc::gen::container<std::vector<SpanShape>>(*rc::gen::inRange<std::size_t>(1, 5), span_shape());
  std::transform(spans.begin(), spans.end(), spans.begin(), fixed_up);
  const auto items = *rc::gen::inRange<std::size_t>(0, 4000);
  sluice::PipelineOptions o;
  // Chunk sizes set by the caller, or left to the pipeline: then items of
  // KiBs (data up to ~200 MiB, several default chunks), and the plan as a
  // run that learnt its kernels dominate, replayed or not, would cut it.
  const bool left_to_pipeline = *rc::gen::arbitrary<bool>();
  if (left_to_pipeline) {
    for (SpanShape& span : spans) span.item_bytes *= 1024;
  } else {
    o.chunk_items = *rc::gen::inRange<std::size_t>(1, 600);
    if (*rc::gen::arbitrary<bool>()) o.first_chunk_items = *rc::gen::inRange<std::size_t>(1, o.chunk_items + 1);
  }
  o.depth = *rc::gen::inRange<std::size_t>(1, 9);
  if (*rc::gen::arbitrary<bool>()) {
    o.kernel_order = sluice::KernelOrder::independent;
    o.compute_streams = *rc::gen::inRange<unsigned>(1, 4);
  }
  const bool caller_stream = *rc::gen::arbitrary<bool>();
  const bool kernel_bound = left_to_pipeline && *rc::gen::arbitrary<bool>();
  return sluice::plan_schedule(o, spans, items, caller_stream, kernel_bound, *rc::gen::arbitrary<bool>());
}

}  // namespace

RC_GTEST_PROP(ScheduleProperties, InvariantsHoldForAnyShape, ()) {
  const Schedule s = random_schedule();
  const auto faults = sluice::check(s);
  RC_ASSERT(faults.empty());
  // Each chunk's operations once, in stage order; each item in exactly one chunk.
  std::size_t next_item = 0;
  for (std::size_t c = 0; c < s.chunk_count(); ++c) {
    const Op h2d = s.op(c, Stage::h2d);
    RC_ASSERT(h2d.items.begin == next_item);
    RC_ASSERT(h2d.items.size() > 0u);
    next_item = h2d.items.end;
    for (Stage stage : {Stage::stage_in, Stage::compute, Stage::d2h, Stage::stage_out})
      RC_ASSERT(s.op(c, stage).items == h2d.items);
  }
  RC_ASSERT(next_item == s.plan().item_count());
  RC_ASSERT(s.submission_order().size() == 3 * s.chunk_count());
}

RC_GTEST_PROP(ScheduleProperties, SlotsAreReusedOnlyAfterTheirRelease, ()) {
  const Schedule s = random_schedule();
  // Two chunks share a slot of a ring only a ring's size apart, and the later
  // one's writer waits, directly or through others, for the earlier one's users.
  for (std::size_t c = 0; c < s.chunk_count(); ++c)
    for (Stage stage : {Stage::stage_in, Stage::h2d, Stage::compute, Stage::d2h, Stage::stage_out})
      for (const auto& use : s.op(c, stage).slots) {
        RC_ASSERT(s.ring_size(use.ring) > 0u);
        RC_ASSERT(use.slot == c % s.ring_size(use.ring));
      }
  // Any one edge kind left out breaks the invariants, once the run is long enough to reuse that ring.
  if (s.chunk_count() > s.ring_size(Ring::event_set) + 1 && !s.stages_out())
    RC_ASSERT(!sluice::check(s, without(Reason::event_set)).empty());
}

RC_GTEST_PROP(ScheduleProperties, TheModelPlaysAnyScheduleToItsEnd, ()) {
  const Schedule s = random_schedule();
  sluice::EngineRates r;
  r.h2d_gbps = r.d2h_gbps = *rc::gen::inRange(1, 100);
  r.both_gbps = *rc::gen::inRange(1, 200);
  r.stage_in_gbps = r.stage_out_gbps = *rc::gen::inRange(1, 100);
  r.stage_both_gbps = *rc::gen::inRange(1, 200);
  sluice::KernelCost k;
  k.ms_per_item = 1e-6 * *rc::gen::inRange(0, 100);
  const auto p = sluice::predict(s, r, sluice::FixedCosts{}, k);
  // Every operation the model plays starts after what it waits on has ended.
  auto stage_of = [](sluice::Lane lane) {
    switch (lane) {
      case sluice::Lane::stage_in: return Stage::stage_in;
      case sluice::Lane::h2d: return Stage::h2d;
      case sluice::Lane::d2h: return Stage::d2h;
      case sluice::Lane::stage_out: return Stage::stage_out;
      default: return Stage::compute;
    }
  };
  std::map<std::size_t, std::pair<double, double>> played;  // OpRef::index() -> start, end
  for (const auto& i : p.timeline) {
    RC_ASSERT(i.end_ms >= i.start_ms - 1e-9);
    played[OpRef{i.chunk, stage_of(i.lane)}.index()] = {i.start_ms, i.end_ms};
  }
  for (const auto& [index, times] : played) {
    const Op op = s.op(index / sluice::stage_count, static_cast<Stage>(index % sluice::stage_count));
    for (const Edge& e : op.waits)
      if (const auto before = played.find(e.on.index()); before != played.end())
        RC_ASSERT(times.first >= before->second.second - 1e-9);
  }
  RC_ASSERT(p.ms >= 0.0);
}
