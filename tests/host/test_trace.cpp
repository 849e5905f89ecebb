#include "sluice/pipeline/run_report.hpp"
#include "sluice/trace/trace.hpp"

#include <gtest/gtest.h>

using sluice::Lane;
using sluice::StageInterval;
using sluice::Trace;

namespace {
StageInterval at(Lane lane, std::size_t chunk, double start, double end, int stream = 0) {
  return StageInterval{lane, chunk, start, end, 0, stream};
}
}  // namespace

TEST(TraceStats, SerialRunHasNoOverlap) {
  Trace t{"sync", {at(Lane::h2d, 0, 0, 4), at(Lane::compute, 0, 4, 6), at(Lane::d2h, 0, 6, 10)}, 10, std::nullopt};
  auto s = sluice::analyze(t);
  EXPECT_DOUBLE_EQ(s.span_ms, 10);
  EXPECT_DOUBLE_EQ(s.overlap_fraction, 0.0);  // touching ends do not overlap
  ASSERT_EQ(s.lanes.size(), 3u);
  EXPECT_DOUBLE_EQ(s.lanes[0].busy_fraction, 0.4);
  ASSERT_TRUE(s.critical.has_value());
  EXPECT_EQ(*s.critical, Lane::h2d);  // 4 ms, tied with D2H: the first wins
}

TEST(TraceStats, PipelinedChunksOverlapAndGapsAreCounted) {
  // Two chunks: chunk 1's H2D runs while chunk 0 computes.
  Trace t{"pipelined",
          {at(Lane::h2d, 0, 0, 2), at(Lane::h2d, 1, 2, 4), at(Lane::compute, 0, 2, 5), at(Lane::compute, 1, 6, 9),
           at(Lane::d2h, 0, 5, 6), at(Lane::d2h, 1, 9, 10)},
          0,
          8.0};
  auto s = sluice::analyze(t);
  EXPECT_DOUBLE_EQ(s.span_ms, 10);  // wall unknown: the last end
  // [2,4] H2D with compute, [5,6] D2H... compute is idle in [5,6]: overlap is [2,4] only.
  EXPECT_DOUBLE_EQ(s.overlap_fraction, 0.2);
  const auto& compute = s.lanes[1];
  EXPECT_EQ(compute.lane, Lane::compute);
  EXPECT_DOUBLE_EQ(compute.busy_ms, 6);
  EXPECT_EQ(compute.gaps, 1u);
  EXPECT_DOUBLE_EQ(compute.longest_gap_ms, 1);
  EXPECT_EQ(*s.critical, Lane::compute);
}

TEST(TraceStats, StreamsOfOneLaneAreUnitedNotAdded) {
  Trace t{"two compute streams", {at(Lane::compute, 0, 0, 4, 0), at(Lane::compute, 1, 1, 5, 1)}, 5, std::nullopt};
  auto s = sluice::analyze(t);
  ASSERT_EQ(s.lanes.size(), 1u);
  EXPECT_DOUBLE_EQ(s.lanes[0].busy_ms, 5);
  EXPECT_DOUBLE_EQ(s.overlap_fraction, 0.0);  // one lane: nothing to overlap with
}

TEST(TraceStats, EmptyTrace) {
  auto s = sluice::analyze(Trace{});
  EXPECT_TRUE(s.lanes.empty());
  EXPECT_FALSE(s.critical.has_value());
  EXPECT_DOUBLE_EQ(s.overlap_fraction, 0.0);
}

TEST(TraceStats, TinyGapsAreJitterNotGaps) {
  Trace t{"jitter", {at(Lane::h2d, 0, 0, 1), at(Lane::h2d, 1, 1.005, 2)}, 2, std::nullopt};
  EXPECT_EQ(sluice::analyze(t).lanes[0].gaps, 0u);
  EXPECT_EQ(sluice::analyze(t, 0.001).lanes[0].gaps, 1u);
}

TEST(Trace, FromRunReport) {
  sluice::RunReport r;
  r.wall_ms = 12;
  r.intervals = {at(Lane::h2d, 0, 0, 3)};
  r.bound = sluice::Bound{10, "h2d", {{"h2d", 10}}};
  auto t = sluice::make_trace("run", r);
  EXPECT_EQ(t.title, "run");
  EXPECT_DOUBLE_EQ(*t.bound_ms, 10);
  EXPECT_DOUBLE_EQ(t.span_ms(), 12);
}
