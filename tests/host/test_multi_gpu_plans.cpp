#include "sluice/multigpu/multi_gpu_plans.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

using sluice::PipelineScheduleKind;
using sluice::StageStep;

namespace {
// Position of each (forward?, micro) step on each stage.
std::map<std::pair<bool, std::size_t>, std::size_t> positions(const std::vector<StageStep>& order) {
  std::map<std::pair<bool, std::size_t>, std::size_t> at;
  for (std::size_t i = 0; i < order.size(); ++i) at[{order[i].forward, order[i].micro}] = i;
  return at;
}
}  // namespace

TEST(PipelineSchedule, EveryMicroBatchOnceForwardThenBackwardOnEveryStage) {
  for (auto kind : {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b})
    for (std::size_t stages : {1u, 2u, 4u})
      for (std::size_t micros : {1u, 3u, 8u, 16u}) {
        const auto steps = sluice::pipeline_schedule(kind, stages, micros);
        ASSERT_EQ(steps.size(), stages);
        for (std::size_t s = 0; s < stages; ++s) {
          ASSERT_EQ(steps[s].size(), 2 * micros);
          const auto at = positions(steps[s]);
          ASSERT_EQ(at.size(), 2 * micros) << "a step repeats";
          for (std::size_t m = 0; m < micros; ++m) EXPECT_LT(at.at({true, m}), at.at({false, m}));
        }
        // Across stages the order holds when the schedule is played: it finishes.
        EXPECT_NO_THROW(sluice::time_schedule(steps, 1, 2, 0.1));
      }
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostStagesMinusSActivations) {
  const std::size_t stages = 4, micros = 16;
  const auto steps = sluice::pipeline_schedule(PipelineScheduleKind::one_f_one_b, stages, micros);
  for (std::size_t s = 0; s < stages; ++s) {
    std::size_t in_flight = 0, most = 0;
    for (const auto& step : steps[s]) {
      in_flight += step.forward ? 1 : 0;
      most = std::max(most, in_flight);
      in_flight -= step.forward ? 0 : 1;
    }
    EXPECT_EQ(most, stages - s) << "stage " << s;
    EXPECT_LE(most, stages);
  }
  // GPipe holds every micro-batch at once.
  const auto gpipe = sluice::pipeline_schedule(PipelineScheduleKind::gpipe, stages, micros);
  std::size_t forwards_before_first_backward = 0;
  while (gpipe[0][forwards_before_first_backward].forward) ++forwards_before_first_backward;
  EXPECT_EQ(forwards_before_first_backward, micros);
}

TEST(PipelineSchedule, BubbleMatchesTheFormulaWithEqualCosts) {
  for (auto kind : {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b})
    for (std::size_t stages : {2u, 4u})
      for (std::size_t micros : {4u, 8u, 16u}) {
        const auto t = sluice::time_schedule(sluice::pipeline_schedule(kind, stages, micros), 1, 1, 0);
        EXPECT_NEAR(t.bubble_fraction, sluice::ideal_bubble(stages, micros), 1e-9) << stages << " stages, " << micros;
        EXPECT_NEAR(t.makespan, 2.0 * static_cast<double>(micros + stages - 1), 1e-9);
      }
}

TEST(PipelineSchedule, ASwappedOrderThatCanNeverFinishIsCaught) {
  auto steps = sluice::pipeline_schedule(PipelineScheduleKind::gpipe, 2, 2);
  std::swap(steps[1][0], steps[1][3]);  // stage 1 starts with a backward whose forward comes last
  EXPECT_THROW(sluice::time_schedule(steps, 1, 1, 0), std::logic_error);
  EXPECT_THROW(sluice::pipeline_schedule(PipelineScheduleKind::gpipe, 0, 4), std::invalid_argument);
}

TEST(PipelineSchedule, IssueOrderPutsEveryStepAfterItsInputAndKeepsStageOrder) {
  for (auto kind : {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b})
    for (std::size_t stages : {1u, 2u, 3u, 4u})
      for (std::size_t micros : {1u, 4u, 9u}) {
        const auto steps = sluice::pipeline_schedule(kind, stages, micros);
        const auto order = sluice::issue_order(steps);
        ASSERT_EQ(order.size(), 2 * stages * micros);
        std::map<std::tuple<std::size_t, bool, std::size_t>, std::size_t> at;
        std::vector<std::size_t> next(stages, 0);
        for (std::size_t i = 0; i < order.size(); ++i) {
          const auto& [s, step] = order[i];
          EXPECT_EQ(step, steps[s][next[s]++]) << "stage order changed";
          at[{s, step.forward, step.micro}] = i;
        }
        for (std::size_t s = 0; s < stages; ++s)
          for (std::size_t m = 0; m < micros; ++m) {
            if (s > 0) {
              EXPECT_LT(at.at({s - 1, true, m}), at.at({s, true, m}));
            }
            if (s + 1 < stages) {
              EXPECT_LT(at.at({s + 1, false, m}), at.at({s, false, m}));
            }
          }
      }
  auto stuck = sluice::pipeline_schedule(PipelineScheduleKind::gpipe, 2, 2);
  std::swap(stuck[1][0], stuck[1][3]);
  EXPECT_THROW(sluice::issue_order(stuck), std::logic_error);
}

TEST(PlanBuckets, EveryGradientOnceInOrder) {
  const std::vector<std::size_t> grads{100, 300, 50, 50, 700, 10, 10, 10, 400};
  const auto buckets = sluice::plan_buckets(grads, 400);
  std::size_t next = 0;
  for (const auto& b : buckets) {
    EXPECT_EQ(b.first, next);
    EXPECT_GT(b.count, 0u);
    std::size_t bytes = 0;
    for (std::size_t i = b.first; i < b.first + b.count; ++i) bytes += grads[i];
    EXPECT_EQ(b.bytes, bytes);
    EXPECT_TRUE(b.bytes <= 400 || b.count == 1) << "a bucket over the size holds one gradient";
    next = b.first + b.count;
  }
  EXPECT_EQ(next, grads.size());
  // {100, 300} {50, 50} {700} {10, 10, 10} {400}
  ASSERT_EQ(buckets.size(), 5u);
  EXPECT_EQ(buckets[2].bytes, 700u);
  EXPECT_EQ(buckets[3].count, 3u);
  EXPECT_EQ(buckets[4].first, 8u);
  EXPECT_TRUE(sluice::plan_buckets({}, 10).empty());
}

TEST(DealItems, EveryItemOnceInProportion) {
  const auto shares = sluice::deal_items(1000, {1, 3}, 10);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0].items, (sluice::ItemRange{0, 250}));
  EXPECT_EQ(shares[1].items, (sluice::ItemRange{250, 1000}));
  for (std::size_t items : {0u, 1u, 7u, 1001u}) {
    const auto s = sluice::deal_items(items, {2, 0, 1, 1}, 4);
    std::size_t next = 0;
    for (const auto& share : s) {
      EXPECT_EQ(share.items.begin, next);
      next = share.items.end;
    }
    EXPECT_EQ(next, items);
    EXPECT_EQ(s[1].items.size(), 0u);  // a zero weight gets nothing
  }
  EXPECT_THROW(sluice::deal_items(10, {}), std::invalid_argument);
  EXPECT_THROW(sluice::deal_items(10, {0, 0}), std::invalid_argument);
  EXPECT_THROW(sluice::deal_items(10, {-1, 2}), std::invalid_argument);
}
