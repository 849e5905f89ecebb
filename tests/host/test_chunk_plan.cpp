#include "sluice/chunk_plan.hpp"

#include <gtest/gtest.h>

using sluice::ChunkPlan;
using sluice::ItemRange;

TEST(ChunkPlan, EvenSplit) {
  ChunkPlan plan(100, 25);
  ASSERT_EQ(plan.chunk_count(), 4u);
  EXPECT_EQ(plan.chunk(3), (ItemRange{75, 100}));
}

TEST(ChunkPlan, LastChunkTakesTheRemainder) {
  ChunkPlan plan(101, 25);
  ASSERT_EQ(plan.chunk_count(), 5u);
  EXPECT_EQ(plan.chunk(4), (ItemRange{100, 101}));
  EXPECT_EQ(plan.chunk(4).size(), 1u);
}

TEST(ChunkPlan, ChunksCoverEveryItemExactlyOnce) {
  for (std::size_t items : {1u, 2u, 7u, 63u, 64u, 65u, 997u}) {
    for (std::size_t chunk : {1u, 3u, 64u, 1000u}) {
      ChunkPlan plan(items, chunk);
      std::size_t next = 0;
      for (std::size_t i = 0; i < plan.chunk_count(); ++i) {
        auto r = plan.chunk(i);
        EXPECT_EQ(r.begin, next);
        EXPECT_GT(r.size(), 0u);
        EXPECT_LE(r.size(), chunk);
        next = r.end;
      }
      EXPECT_EQ(next, items) << items << " items in chunks of " << chunk;
    }
  }
}

TEST(ChunkPlan, ChunkLargerThanInputIsOneChunk) {
  ChunkPlan plan(10, 1000);
  ASSERT_EQ(plan.chunk_count(), 1u);
  EXPECT_EQ(plan.chunk(0), (ItemRange{0, 10}));
}

TEST(ChunkPlan, EmptyInputHasNoChunks) { EXPECT_EQ(ChunkPlan(0, 8).chunk_count(), 0u); }

TEST(ChunkPlan, RejectsZeroChunkAndOutOfRangeIndex) {
  EXPECT_THROW(ChunkPlan(10, 0), std::invalid_argument);
  EXPECT_THROW(ChunkPlan(10, 5).chunk(2), std::out_of_range);
}

TEST(DefaultChunkItems, AboutAHundredTwentyEighthWithinLimits) {
  constexpr std::size_t MiB = 1 << 20;
  // 1 GiB of floats: 1/128 is 8 MiB.
  EXPECT_EQ(sluice::default_chunk_items(256 * MiB, 4), 2 * MiB);
  // 4 GiB of floats: 1/128 is 32 MiB, capped at 16 MiB.
  EXPECT_EQ(sluice::default_chunk_items(1024 * MiB, 4), 4 * MiB);
  // 128 MiB of floats: 1/128 is 1 MiB, raised to the 2 MiB minimum.
  EXPECT_EQ(sluice::default_chunk_items(32 * MiB, 4), MiB / 2);
  // Tiny inputs: one chunk of everything.
  EXPECT_EQ(sluice::default_chunk_items(10, 4), 10u);
  EXPECT_EQ(sluice::default_chunk_items(0, 4), 1u);
  // Huge items: never below one item.
  EXPECT_EQ(sluice::default_chunk_items(100, 64 * MiB), 1u);
}
