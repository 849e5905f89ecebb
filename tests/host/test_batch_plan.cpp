#include "sluice/loader/batch_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

using sluice::BatchPlan;
using sluice::BatchPlanOptions;
using sluice::LoaderState;

namespace {

BatchPlanOptions opts(std::size_t batch, bool shuffle, std::uint64_t seed = 7, std::size_t rank = 0, std::size_t world = 1,
                      bool drop_last = false) {
  BatchPlanOptions o;
  o.batch = batch;
  o.shuffle = shuffle;
  o.seed = seed;
  o.rank = rank;
  o.world = world;
  o.drop_last = drop_last;
  return o;
}

std::vector<std::size_t> batch_items(const BatchPlan& plan, LoaderState at) {
  std::vector<std::size_t> items;
  for (std::size_t r = 0; r < plan.batch_rows(at); ++r) items.push_back(plan.item(at, r));
  return items;
}

// Every item a rank serves in one epoch, in order.
std::vector<std::size_t> epoch_items(const BatchPlan& plan, std::uint64_t epoch) {
  std::vector<std::size_t> items;
  for (LoaderState at{epoch, 0}; at.epoch == epoch; at = plan.next(at))
    for (std::size_t item : batch_items(plan, at)) items.push_back(item);
  return items;
}

// A job of `world` ranks of `batch` rows: one plan per rank.
std::vector<BatchPlan> job(std::size_t items, std::size_t batch, std::size_t world, bool drop_last = false) {
  std::vector<BatchPlan> ranks;
  for (std::size_t r = 0; r < world; ++r) ranks.emplace_back(items, opts(batch, true, 21, r, world, drop_last));
  return ranks;
}

// The global batch at `at`: every rank's rows, rank after rank.
std::vector<std::size_t> global_batch(const std::vector<BatchPlan>& ranks, LoaderState at) {
  std::vector<std::size_t> items;
  for (const auto& plan : ranks)
    for (std::size_t item : batch_items(plan, at)) items.push_back(item);
  return items;
}

}  // namespace

TEST(BatchPlan, SequentialIsInOrder) {
  const BatchPlan plan(10, opts(4, false));
  EXPECT_EQ(plan.batches_per_epoch(), 3u);
  EXPECT_EQ(plan.batch_rows({0, 8}), 2u);
  EXPECT_TRUE(plan.last_of_epoch({0, 8}));
  const auto items = epoch_items(plan, 0);
  std::vector<std::size_t> expected(10);
  for (std::size_t i = 0; i < 10; ++i) expected[i] = i;
  EXPECT_EQ(items, expected);
}

TEST(BatchPlan, AShuffledEpochVisitsEveryItemExactlyOnce) {
  for (std::size_t n : {1u, 2u, 3u, 5u, 16u, 17u, 1000u, 4097u, 65537u}) {
    const BatchPlan plan(n, opts(std::min<std::size_t>(3, n), true));
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

TEST(BatchPlan, RanksServeTheSameNumberOfFullBatchesAndCoverEveryItem) {
  // 10 items, 3 ranks of 1: the tail of one item is padded to a global batch
  // of 3, so every rank serves 4 batches (unequal counts hang a job's collectives).
  for (std::size_t world : {2u, 3u, 8u})
    for (std::size_t n : {world, std::size_t{10}, std::size_t{100}, std::size_t{101}, std::size_t{1023}}) {
      const std::size_t batch = std::min<std::size_t>(4, n / world);
      std::vector<int> seen(n, 0);
      const auto ranks = job(n, batch, world);
      for (const auto& plan : ranks) {
        EXPECT_EQ(plan.batches_per_epoch(), (n + batch * world - 1) / (batch * world));
        for (LoaderState at; at.epoch == 0; at = plan.next(at)) ASSERT_EQ(plan.batch_rows(at), batch);
        for (std::size_t item : epoch_items(plan, 3)) ++seen[item];
      }
      // Every item at least once; only the padding (fewer than a global batch) twice.
      const std::size_t padding = ranks[0].batches_per_epoch() * batch * world - n;
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 0), 0) << n << " items, world " << world;
      EXPECT_EQ(static_cast<std::size_t>(std::count(seen.begin(), seen.end(), 2)), padding) << n << " items, world " << world;
    }
}

TEST(BatchPlan, TenItemsOverThreeRanksOfOneAreFourBatchesEach) {
  // Served short, ranks would hold 4, 3 and 3 batches, and rank 0's fourth
  // step would wait for ever in an all-reduce the others never join.
  for (const auto& plan : job(10, 1, 3)) EXPECT_EQ(plan.batches_per_epoch(), 4u);
  for (const auto& plan : job(10, 1, 3, true)) EXPECT_EQ(plan.batches_per_epoch(), 3u);
}

TEST(BatchPlan, DropLastGivesEveryRankTheSameFullBatches) {
  for (std::size_t world : {1u, 3u, 4u}) {
    std::set<std::size_t> all;
    for (const auto& plan : job(1001, 8, world, true)) {
      EXPECT_EQ(plan.batches_per_epoch(), 1001 / (world * 8));
      for (LoaderState at; at.epoch == 0; at = plan.next(at)) EXPECT_EQ(plan.batch_rows(at), 8u);
      for (std::size_t item : epoch_items(plan, 0)) EXPECT_TRUE(all.insert(item).second) << "served twice: " << item;
    }
    EXPECT_EQ(all.size(), 1001 / (world * 8) * world * 8);
  }
}

TEST(BatchPlan, SaveAndRestoreResumesTheIdenticalSequence) {
  const BatchPlan plan(77, opts(5, true, 11));
  std::vector<std::vector<std::size_t>> straight;
  LoaderState s;
  for (int i = 0; i < 40; ++i) {  // across epoch boundaries
    straight.push_back(batch_items(plan, s));
    s = plan.next(s);
  }
  LoaderState saved;
  for (int i = 0; i < 23; ++i) saved = plan.next(saved);
  const BatchPlan restored(77, opts(5, true, 11));  // a new process with the same options
  LoaderState t = restored.resume_at(saved);
  for (int i = 23; i < 40; ++i) {
    EXPECT_EQ(batch_items(restored, t), straight[static_cast<std::size_t>(i)]) << "batch " << i;
    t = restored.next(t);
  }
  EXPECT_EQ(saved.epoch, 1u);  // 16 batches an epoch
  EXPECT_EQ(saved.sample, 35u);
}

TEST(BatchPlan, AStateSavedOnFourRanksResumesOnTwoAndThreeSampleForSample) {
  // 4 ranks of 6 and 2 of 12 and 3 of 8: one global batch of 24. The job
  // saves after 30 global batches (in its second epoch, 42 an epoch, the
  // last padded) and resumes on fewer ranks: every global batch that follows,
  // its ranks' rows put together in rank order, is the uninterrupted job's.
  const std::size_t items = 1000, steps = 100, saved_at = 50;
  const auto four = job(items, 6, 4);
  std::vector<std::vector<std::size_t>> straight;
  LoaderState at, saved;
  for (std::size_t s = 0; s < steps; ++s, at = four[0].next(at)) {
    if (s == saved_at) saved = at;
    straight.push_back(global_batch(four, at));
  }
  ASSERT_EQ(saved.epoch, 1u);
  for (const auto& [world, batch] : {std::pair<std::size_t, std::size_t>{2, 12}, {3, 8}, {4, 6}}) {
    const auto resumed = job(items, batch, world);
    LoaderState t = resumed[0].resume_at(saved);
    for (std::size_t s = saved_at; s < steps; ++s, t = resumed[0].next(t))
      ASSERT_EQ(global_batch(resumed, t), straight[s]) << world << " ranks, global batch " << s;
  }
}

TEST(BatchPlan, AnotherGlobalBatchServesTheRestOfTheEpochOnceThenItsOwnEpochs) {
  // Saved by 4 ranks of 6 (global 24) after 20 batches of epoch 0; resumed by
  // 2 ranks of 10 (global 20): the rest of epoch 0 is exactly the items the
  // first job had not served, in the same global order; epoch 1 is the new
  // job's own, as if it had run from the start.
  const std::size_t items = 1000;
  const auto four = job(items, 6, 4, true);
  LoaderState saved;
  std::vector<std::size_t> order;  // epoch 0's global order, as the first job serves it
  for (LoaderState at; at.epoch == 0; at = four[0].next(at)) {
    if (at.sample == 20 * 24) saved = at;
    for (std::size_t item : global_batch(four, at)) order.push_back(item);
  }
  const auto two = job(items, 10, 2, true);
  std::vector<std::size_t> rest;
  LoaderState t = two[0].resume_at(saved);
  for (; t.epoch == 0; t = two[0].next(t))
    for (std::size_t item : global_batch(two, t)) rest.push_back(item);
  // The same order from the saved position; drop_last ends the epoch at the last whole batch of 20.
  const std::size_t served = (items - saved.sample) / 20 * 20;
  ASSERT_EQ(rest.size(), served);
  for (std::size_t k = 0; k < rest.size(); ++k) ASSERT_EQ(rest[k], four[0].permuted(0, saved.sample + k)) << "position " << k;
  // What the first job served before saving and what the second served after: every item, once (520 = 26 x 20).
  std::vector<std::size_t> both(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(saved.sample));
  both.insert(both.end(), rest.begin(), rest.end());
  std::sort(both.begin(), both.end());
  ASSERT_EQ(both.size(), items);
  for (std::size_t i = 0; i < items; ++i) ASSERT_EQ(both[i], i);
  std::vector<std::size_t> fresh_epoch;
  for (LoaderState f{1, 0}; f.epoch == 1; f = two[0].next(f))
    for (std::size_t item : global_batch(two, f)) fresh_epoch.push_back(item);
  std::vector<std::size_t> resumed_epoch;
  for (; t.epoch == 1; t = two[0].next(t))
    for (std::size_t item : global_batch(two, t)) resumed_epoch.push_back(item);
  EXPECT_EQ(resumed_epoch, fresh_epoch);
}

TEST(BatchPlan, AStateInATailThisPlanDropsResumesAtTheNextEpoch) {
  const BatchPlan plan(100, opts(8, true, 1, 0, 1, true));  // 12 batches, 4 items dropped
  EXPECT_EQ(plan.resume_at({3, 96}), (LoaderState{4, 0}));
  EXPECT_EQ(plan.resume_at({3, 92}), (LoaderState{3, 92}));
  EXPECT_THROW(plan.resume_at({3, 101}), std::invalid_argument);  // saved over other data
  EXPECT_THROW(plan.batch_rows({3, 96}), std::out_of_range);
}

TEST(BatchPlan, BadOptionsAreRefused) {
  EXPECT_THROW(BatchPlan(10, opts(0, false)), std::invalid_argument);
  EXPECT_THROW(BatchPlan(10, opts(1, false, 0, 2, 2)), std::invalid_argument);
  EXPECT_THROW(BatchPlan(10, opts(1, false, 0, 0, 0)), std::invalid_argument);
  EXPECT_THROW(BatchPlan(0, opts(1, false)), std::invalid_argument);
  EXPECT_THROW(BatchPlan(7, opts(8, false)), std::invalid_argument);  // a batch larger than the data
  EXPECT_THROW(BatchPlan(10, opts(4, false, 0, 1, 3)), std::invalid_argument);  // 12 rows over 10 items
  try {
    BatchPlan(10, opts(4, false, 0, 0, 3));
    ADD_FAILURE() << "a global batch over the data was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "batch plan: a global batch of 4 rows x 3 ranks is larger than the 10 items of the data");
  }
  EXPECT_THROW(BatchPlan(10, opts(4, false)).batch_rows({0, 12}), std::out_of_range);
}
