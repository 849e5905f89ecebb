#include "sluice/batch_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

using sluice::BatchPlan;
using sluice::BatchPlanOptions;
using sluice::LoaderState;

namespace {

BatchPlanOptions opts(std::size_t batch, bool shuffle, std::uint64_t seed = 7, std::size_t rank = 0, std::size_t world = 1) {
  BatchPlanOptions o;
  o.batch = batch;
  o.shuffle = shuffle;
  o.seed = seed;
  o.rank = rank;
  o.world = world;
  return o;
}

// Every item a rank serves in one epoch, in order.
std::vector<std::size_t> epoch_items(const BatchPlan& plan, std::uint64_t epoch) {
  std::vector<std::size_t> items;
  for (std::size_t b = 0; b < plan.batches_per_epoch(); ++b)
    for (std::size_t r = 0; r < plan.batch_rows(b); ++r) items.push_back(plan.item(epoch, b, r));
  return items;
}

}  // namespace

TEST(BatchPlan, SequentialIsInOrder) {
  const BatchPlan plan(10, opts(4, false));
  EXPECT_EQ(plan.batches_per_epoch(), 3u);
  EXPECT_EQ(plan.batch_rows(2), 2u);
  const auto items = epoch_items(plan, 0);
  std::vector<std::size_t> expected(10);
  for (std::size_t i = 0; i < 10; ++i) expected[i] = i;
  EXPECT_EQ(items, expected);
}

TEST(BatchPlan, AShuffledEpochVisitsEveryItemExactlyOnce) {
  for (std::size_t n : {1u, 2u, 3u, 5u, 16u, 17u, 1000u, 4097u, 65537u}) {
    const BatchPlan plan(n, opts(3, true));
    for (std::uint64_t epoch : {0u, 1u, 9u}) {
      auto items = epoch_items(plan, epoch);
      std::sort(items.begin(), items.end());
      ASSERT_EQ(items.size(), n);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(items[i], i) << n << " items, epoch " << epoch;
    }
  }
}

TEST(BatchPlan, ShufflesAreSeededDifferentPerEpochAndReproducible) {
  const BatchPlan a(1000, opts(10, true, 42)), b(1000, opts(10, true, 42)), c(1000, opts(10, true, 43));
  EXPECT_EQ(epoch_items(a, 0), epoch_items(b, 0));
  EXPECT_NE(epoch_items(a, 0), epoch_items(a, 1));
  EXPECT_NE(epoch_items(a, 0), epoch_items(c, 0));
  std::vector<std::size_t> identity(1000);
  for (std::size_t i = 0; i < 1000; ++i) identity[i] = i;
  EXPECT_NE(epoch_items(a, 0), identity);
}

TEST(BatchPlan, RanksAreDisjointAndCoverEveryItem) {
  for (std::size_t world : {1u, 2u, 3u, 8u})
    for (std::size_t n : {world, std::size_t{100}, std::size_t{101}, std::size_t{1023}}) {
      std::vector<int> seen(n, 0);
      std::size_t most = 0, least = SIZE_MAX;
      for (std::size_t rank = 0; rank < world; ++rank) {
        const BatchPlan plan(n, opts(4, true, 5, rank, world));
        const auto items = epoch_items(plan, 3);
        most = std::max(most, plan.batches_per_epoch());
        least = std::min(least, plan.batches_per_epoch());
        for (std::size_t item : items) ++seen[item];
      }
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "item " << i << ", " << n << " items, world " << world;
      EXPECT_LE(most - least, 1u);
    }
}

TEST(BatchPlan, DropLastGivesEveryRankTheSameFullBatches) {
  for (std::size_t world : {1u, 3u, 4u}) {
    std::set<std::size_t> all;
    for (std::size_t rank = 0; rank < world; ++rank) {
      BatchPlanOptions o = opts(8, true, 1, rank, world);
      o.drop_last = true;
      const BatchPlan plan(1001, o);
      EXPECT_EQ(plan.batches_per_epoch(), 1001 / world / 8);
      for (std::size_t b = 0; b < plan.batches_per_epoch(); ++b) EXPECT_EQ(plan.batch_rows(b), 8u);
      for (std::size_t item : epoch_items(plan, 0)) EXPECT_TRUE(all.insert(item).second) << "served twice: " << item;
    }
  }
}

TEST(BatchPlan, SaveAndRestoreResumesTheIdenticalSequence) {
  const BatchPlan plan(77, opts(5, true, 11));
  std::vector<std::vector<std::size_t>> straight;
  LoaderState s;
  for (int i = 0; i < 40; ++i) {  // across epoch boundaries
    std::vector<std::size_t> batch;
    for (std::size_t r = 0; r < plan.batch_rows(s.batch); ++r) batch.push_back(plan.item(s.epoch, s.batch, r));
    straight.push_back(batch);
    s = plan.next(s);
  }
  LoaderState saved;
  for (int i = 0; i < 23; ++i) saved = plan.next(saved);
  const BatchPlan restored(77, opts(5, true, 11));  // a new process with the same options
  LoaderState t = saved;
  for (int i = 23; i < 40; ++i) {
    std::vector<std::size_t> batch;
    for (std::size_t r = 0; r < restored.batch_rows(t.batch); ++r) batch.push_back(restored.item(t.epoch, t.batch, r));
    EXPECT_EQ(batch, straight[static_cast<std::size_t>(i)]) << "batch " << i;
    t = restored.next(t);
  }
  EXPECT_EQ(saved.epoch, 1u);  // 16 batches an epoch
  EXPECT_EQ(saved.batch, 7u);
}

TEST(BatchPlan, BadOptionsAreRefused) {
  EXPECT_THROW(BatchPlan(10, opts(0, false)), std::invalid_argument);
  EXPECT_THROW(BatchPlan(10, opts(1, false, 0, 2, 2)), std::invalid_argument);
  EXPECT_THROW(BatchPlan(10, opts(1, false, 0, 0, 0)), std::invalid_argument);
  EXPECT_THROW(BatchPlan(0, opts(1, false)), std::invalid_argument);
  BatchPlanOptions o = opts(8, false);
  o.drop_last = true;
  EXPECT_THROW(BatchPlan(7, o), std::invalid_argument);  // not one full batch
  EXPECT_THROW(BatchPlan(10, opts(4, false)).batch_rows(3), std::out_of_range);
}
