#include "sluice/pipeline/chunk_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "pipeline/schedule/chunking.hpp"

using sluice::ChunkPlan;
using sluice::ItemRange;

namespace {
// Every item exactly once, in order, no empty chunk, none above the largest.
void expect_tiling(const ChunkPlan& plan, std::size_t items, const std::string& what) {
  std::size_t next = 0;
  for (std::size_t i = 0; i < plan.chunk_count(); ++i) {
    const auto r = plan.chunk(i);
    ASSERT_EQ(r.begin, next) << what << ", chunk " << i;
    ASSERT_GT(r.size(), 0u) << what << ", chunk " << i;
    ASSERT_LE(r.size(), plan.chunk_items()) << what << ", chunk " << i;
    next = r.end;
  }
  EXPECT_EQ(next, items) << what;
}
}  // namespace

TEST(ChunkPlan, EvenSplit) {
  ChunkPlan plan(100, 25);
  ASSERT_EQ(plan.chunk_count(), 4u);
  EXPECT_EQ(plan.chunk(3), (ItemRange{75, 100}));
  EXPECT_FALSE(plan.is_ramped());
}

TEST(ChunkPlan, LastChunkTakesTheRemainder) {
  ChunkPlan plan(101, 25);
  ASSERT_EQ(plan.chunk_count(), 5u);
  EXPECT_EQ(plan.chunk(4), (ItemRange{100, 101}));
}

TEST(ChunkPlan, UniformChunksCoverEveryItemExactlyOnce) {
  for (std::size_t items : {1u, 2u, 7u, 63u, 64u, 65u, 997u})
    for (std::size_t chunk : {1u, 3u, 64u, 1000u})
      expect_tiling(ChunkPlan(items, chunk), items, std::to_string(items) + " in " + std::to_string(chunk));
}

TEST(ChunkPlan, EmptyInputHasNoChunks) {
  EXPECT_EQ(ChunkPlan(0, 8).chunk_count(), 0u);
  EXPECT_EQ(ChunkPlan::ramped(0, 8, 2).chunk_count(), 0u);
}

TEST(ChunkPlan, RejectsZeroChunkAndOutOfRangeIndex) {
  EXPECT_THROW(ChunkPlan(10, 0), std::invalid_argument);
  EXPECT_THROW(ChunkPlan::ramped(10, 0, 1), std::invalid_argument);
  EXPECT_THROW(ChunkPlan::ramped(10, 4, 0), std::invalid_argument);
  EXPECT_THROW(ChunkPlan(10, 5).chunk(2), std::out_of_range);
  EXPECT_THROW(ChunkPlan::ramped(100000, 1000, 100).chunk(1000), std::out_of_range);
}

TEST(ChunkPlan, ChunkItemsIsTheLargestChunkOfThePlan) {
  const ChunkPlan ramped = ChunkPlan::ramped(1'000'003, 100'000, 5000);
  std::size_t largest = 0;
  for (std::size_t i = 0; i < ramped.chunk_count(); ++i) largest = std::max(largest, ramped.chunk(i).size());
  EXPECT_EQ(ramped.chunk_items(), largest);
  EXPECT_LE(largest, 100'000u);
  EXPECT_EQ(ChunkPlan(10, 1000).chunk_items(), 10u);
}

TEST(ChunkPlan, RampDoublesUpAndHalvesDown) {
  const ChunkPlan plan = ChunkPlan::ramped(100'000, 8000, 1000);
  ASSERT_TRUE(plan.is_ramped());
  const std::size_t n = plan.chunk_count();
  EXPECT_EQ(plan.chunk(0).size(), 1000u);
  EXPECT_EQ(plan.chunk(1).size(), 2000u);
  EXPECT_EQ(plan.chunk(2).size(), 4000u);
  EXPECT_EQ(plan.chunk(n - 1).size(), 1000u);
  EXPECT_EQ(plan.chunk(n - 2).size(), 2000u);
  EXPECT_EQ(plan.chunk(n - 3).size(), 4000u);
  expect_tiling(plan, 100'000, "ramped");
}

TEST(ChunkPlan, RampIsMonotoneForManyShapes) {
  for (std::size_t items : {1u, 5u, 100u, 4095u, 65536u, 1'000'003u})
    for (std::size_t chunk : {1u, 7u, 512u, 4096u, 100'000u})
      for (std::size_t first : {1u, 3u, 64u, 1000u}) {
        const ChunkPlan plan = ChunkPlan::ramped(items, chunk, first);
        const std::string what = std::to_string(items) + "/" + std::to_string(chunk) + "/" + std::to_string(first);
        expect_tiling(plan, items, what);
        // Never shrinking on the way to the largest chunk, never growing after it.
        std::size_t peak = 0;
        for (std::size_t i = 1; i < plan.chunk_count(); ++i)
          if (plan.chunk(i).size() > plan.chunk(peak).size()) peak = i;
        for (std::size_t i = 1; i <= peak; ++i) {
          ASSERT_GE(plan.chunk(i).size(), plan.chunk(i - 1).size()) << what;
        }
        if (plan.is_ramped()) {
          for (std::size_t i = peak + 1; i < plan.chunk_count(); ++i) {
            ASSERT_LE(plan.chunk(i).size(), plan.chunk(i - 1).size()) << what;
          }
        }
      }
}

TEST(ChunkPlan, TooFewItemsForAFullRampUseAShorterOne) {
  // A ramp 1, 2, 4 at both ends needs 14 items besides one chunk of 8; 10 items keep only the 1.
  const ChunkPlan plan = ChunkPlan::ramped(10, 8, 1);
  ASSERT_EQ(plan.chunk_count(), 3u);
  EXPECT_EQ(plan.chunk(0).size(), 1u);
  EXPECT_EQ(plan.chunk(1).size(), 8u);
  EXPECT_EQ(plan.chunk(2).size(), 1u);
  // Fewer still: no ramp at all.
  const ChunkPlan flat = ChunkPlan::ramped(5, 8, 1);
  EXPECT_FALSE(flat.is_ramped());
  expect_tiling(flat, 5, "flat");
}

TEST(ChunkPlan, SizesNearTheTopOfSizeTDoNotWrap) {
  constexpr std::size_t top = SIZE_MAX;
  // A first size above half of size_t: doubling it wraps, and the ramp must stop before that.
  const ChunkPlan wide = ChunkPlan::ramped(top, top, top / 2 + 2);
  ASSERT_GE(wide.chunk_count(), 1u);
  EXPECT_EQ(wide.chunk(wide.chunk_count() - 1).end, top);
  EXPECT_LE(wide.chunk_items(), top);
  // Steps 3, 6, 12, ... below size_t's top add up past it.
  const ChunkPlan threes = ChunkPlan::ramped(top, top - 1, 3);
  EXPECT_EQ(threes.chunk(threes.chunk_count() - 1).end, top);
  const ChunkPlan uniform(top, 2);
  EXPECT_EQ(uniform.chunk_count(), top / 2 + 1);
  EXPECT_EQ(uniform.chunk(uniform.chunk_count() - 1), (ItemRange{top - 1, top}));
}

TEST(DefaultChunking, SquareRootOfTheDataWithinLimitsNoRamp) {
  constexpr std::size_t MiB = 1 << 20;
  // 1 GiB of floats: sqrt(1 GiB x 0.25 MiB) is 16 MiB.
  auto c = sluice::default_chunking(256 * MiB, 4);
  EXPECT_EQ(c.chunk_items, 4 * MiB);
  EXPECT_EQ(c.first_items, c.chunk_items);
  // 256 MiB of floats: 8 MiB chunks.
  c = sluice::default_chunking(64 * MiB, 4);
  EXPECT_EQ(c.chunk_items, 2 * MiB);
  EXPECT_EQ(c.first_items, c.chunk_items);
  // 64 GiB: capped at 16 MiB.
  EXPECT_EQ(sluice::default_chunking(16 * 1024 * MiB, 4).chunk_items, 4 * MiB);
  // 4 MiB: 1 MiB chunks, the floor.
  c = sluice::default_chunking(MiB, 4);
  EXPECT_EQ(c.chunk_items, MiB / 4);
  // 12 MiB: sqrt(12 MiB x 0.25 MiB) is 1.73 MiB.
  c = sluice::default_chunking(3 * MiB, 4);
  EXPECT_NEAR(static_cast<double>(c.chunk_items) * 4, 1.7320 * MiB, 0.001 * MiB);
  // 2 MiB and below: one chunk.
  c = sluice::default_chunking(MiB / 2, 4);
  EXPECT_EQ(c.chunk_items, MiB / 2);
  EXPECT_EQ(c.first_items, MiB / 2);
  EXPECT_EQ(sluice::default_chunking(0, 4).chunk_items, 1u);
  // Huge items: never below one item.
  EXPECT_EQ(sluice::default_chunking(100, 64 * MiB).chunk_items, 1u);
}

TEST(DefaultChunking, HostCopiesBothWaysUse4MiBChunks) {
  constexpr std::size_t MiB = 1 << 20;
  auto chunk_mib = [](std::size_t floats) {
    return static_cast<double>(sluice::default_chunking(floats, 4, {.host_copies_both_ways = true}).chunk_items) * 4 / MiB;
  };
  EXPECT_EQ(chunk_mib(256 * MiB), 4.0);         // 1 GiB: 4 MiB, not 16
  EXPECT_EQ(chunk_mib(16 * 1024 * MiB), 4.0);   // 64 GiB
  EXPECT_EQ(chunk_mib(64 * MiB), 4.0);          // 256 MiB: 4 MiB, not 8
  EXPECT_EQ(chunk_mib(8 * MiB), 4.0);           // 32 MiB: 4 MiB, not 2.8
  EXPECT_EQ(chunk_mib(4 * MiB), 2.0);           // 16 MiB: eight chunks, below 4 MiB
  EXPECT_NEAR(chunk_mib(6 * MiB), 3.0, 0.001);  // 24 MiB: eight chunks, above the square root (2.45)
  EXPECT_EQ(chunk_mib(MiB), 1.0);               // 4 MiB: the usual 1 MiB
  EXPECT_EQ(chunk_mib(MiB / 2), 2.0);           // 2 MiB: one chunk, as otherwise
  // Otherwise the usual sizes; and the plan follows the flag.
  EXPECT_EQ(static_cast<double>(sluice::default_chunking(256 * MiB, 4).chunk_items) * 4 / MiB, 16.0);
  sluice::PipelineOptions o;
  EXPECT_EQ(sluice::plan_chunks(o, 256 * MiB, 4, {.host_copies_both_ways = true}).chunk_items(), MiB);
  EXPECT_EQ(sluice::plan_chunks(o, 256 * MiB, 4).chunk_items(), 4 * MiB);
  o.chunk_items = 1000;  // a size set in the options is kept either way
  EXPECT_EQ(sluice::plan_chunks(o, 256 * MiB, 4, {.host_copies_both_ways = true}).chunk_items(), 1000u);
}

TEST(PlanChunks, OptionsDecideTheShape) {
  sluice::PipelineOptions o;
  constexpr std::size_t items = 64 << 20;
  EXPECT_FALSE(sluice::plan_chunks(o, items, 4).is_ramped());  // equal chunks by default
  o.first_chunk_items = 1 << 16;  // a ramp when asked for, around the default chunk
  EXPECT_TRUE(sluice::plan_chunks(o, items, 4).is_ramped());
  o.ramp = false;  // and none when told not to
  EXPECT_FALSE(sluice::plan_chunks(o, items, 4).is_ramped());
  o = {};
  o.chunk_items = 1000;  // a size set alone: uniform chunks of it
  auto plan = sluice::plan_chunks(o, 10'000, 4);
  EXPECT_FALSE(plan.is_ramped());
  EXPECT_EQ(plan.chunk_count(), 10u);
  o.first_chunk_items = 100;  // and a ramp when asked for
  plan = sluice::plan_chunks(o, 10'000, 4);
  EXPECT_TRUE(plan.is_ramped());
  EXPECT_EQ(plan.chunk(0).size(), 100u);
  o.chunk_items = 1'000'000;  // never larger than the data
  EXPECT_EQ(sluice::plan_chunks(o, 10'000, 4).chunk_items(), 10'000u);
}

TEST(DefaultChunking, KernelsThatDominateRampFrom512KiB) {
  constexpr std::size_t KiB = 1024, MiB = KiB * KiB;
  EXPECT_TRUE(sluice::kernels_dominate(2.0, 1.0, 1.5));
  EXPECT_FALSE(sluice::kernels_dominate(1.2, 1.0, 0.5));  // within the margin: copies still decide
  EXPECT_FALSE(sluice::kernels_dominate(0.0, 0.0, 0.0));
  EXPECT_TRUE(sluice::kernels_dominate(1.0, 0.0, 0.0));   // nothing copied: the kernels are all there is
  sluice::PipelineOptions o;
  // 4 MiB of floats: 512 KiB, then the usual 1 MiB chunks, and 512 KiB last.
  auto plan = sluice::plan_chunks(o, MiB, 4, {.kernel_bound = true});
  ASSERT_TRUE(plan.is_ramped());
  EXPECT_EQ(plan.chunk(0).size() * 4, 512 * KiB);
  EXPECT_EQ(plan.chunk(plan.chunk_count() - 1).size() * 4, 512 * KiB);
  EXPECT_EQ(plan.chunk_items() * 4, MiB);
  EXPECT_EQ(plan.chunk_count(), 5u);
  // 1 GiB: up from 512 KiB by doubling to the usual 16 MiB (the middle's chunks balanced, no larger).
  plan = sluice::plan_chunks(o, 256 * MiB, 4, {.kernel_bound = true});
  EXPECT_EQ(plan.chunk(0).size() * 4, 512 * KiB);
  EXPECT_EQ(plan.chunk(1).size() * 4, MiB);
  EXPECT_LE(plan.chunk_items() * 4, 16 * MiB);
  EXPECT_GT(plan.chunk_items() * 4, 15 * MiB);
  // 2 MiB, one chunk otherwise: 512 KiB, 1 MiB, 512 KiB.
  plan = sluice::plan_chunks(o, MiB / 2, 4, {.kernel_bound = true});
  EXPECT_EQ(plan.chunk_count(), 3u);
  EXPECT_EQ(plan.chunk(0).size() * 4, 512 * KiB);
  // No ramp where the host copies both ways, where the caller set the size,
  // or where adapting is off.
  EXPECT_FALSE(sluice::plan_chunks(o, 256 * MiB, 4, {.host_copies_both_ways = true, .kernel_bound = true}).is_ramped());
  o.adapt_chunks = false;
  EXPECT_FALSE(sluice::plan_chunks(o, 256 * MiB, 4, {.kernel_bound = true}).is_ramped());
  o = {};
  o.chunk_items = MiB;
  EXPECT_FALSE(sluice::plan_chunks(o, 256 * MiB, 4, {.kernel_bound = true}).is_ramped());
}

TEST(DefaultChunking, KernelsThatDominateAndOverlapUseEqualHalfMiBChunksUpTo16MiB) {
  constexpr std::size_t KiB = 1024, MiB = KiB * KiB;
  sluice::PipelineOptions o;
  o.kernel_order = sluice::KernelOrder::independent;  // two compute streams
  auto all_half_mib = [](const sluice::ChunkPlan& plan) {
    for (std::size_t c = 0; c + 1 < plan.chunk_count(); ++c)
      if (plan.chunk(c).size() * 4 != 512 * KiB) return false;
    return !plan.is_ramped() && plan.chunk(plan.chunk_count() - 1).size() * 4 <= 512 * KiB;
  };
  // 4 MiB and 16 MiB of floats (usual chunks of 1 and 2 MiB): 8 and 32 chunks of 512 KiB.
  EXPECT_TRUE(all_half_mib(sluice::plan_chunks(o, MiB, 4, {.kernel_bound = true})));
  EXPECT_EQ(sluice::plan_chunks(o, MiB, 4, {.kernel_bound = true}).chunk_count(), 8u);
  EXPECT_EQ(sluice::plan_chunks(o, 4 * MiB, 4, {.kernel_bound = true}).chunk_count(), 32u);
  // 2 MiB, one chunk otherwise: four.
  EXPECT_EQ(sluice::plan_chunks(o, MiB / 2, 4, {.kernel_bound = true}).chunk_count(), 4u);
  // 64 MiB (usual 4 MiB chunks), and just over 16 MiB (just over 2 MiB):
  // the ramp from 512 KiB, as with one stream.
  auto plan = sluice::plan_chunks(o, 16 * MiB, 4, {.kernel_bound = true});
  ASSERT_TRUE(plan.is_ramped());
  EXPECT_EQ(plan.chunk(0).size() * 4, 512 * KiB);
  EXPECT_GT(plan.chunk_items() * 4, 2 * MiB);
  plan = sluice::plan_chunks(o, 4 * MiB + 64 * KiB, 4, {.kernel_bound = true});
  ASSERT_TRUE(plan.is_ramped());
  EXPECT_EQ(plan.chunk(0).size() * 4, 512 * KiB);
  // Items wider than 512 KiB: one item a chunk.
  EXPECT_EQ(sluice::plan_chunks(o, 8, MiB, {.kernel_bound = true}).chunk_count(), 8u);
  // Options that fix the shape keep it: no ramp refused, no first chunk set.
  sluice::PipelineOptions fixed = o;
  fixed.ramp = false;
  EXPECT_EQ(sluice::plan_chunks(fixed, MiB, 4, {.kernel_bound = true}).chunk_items() * 4, MiB);
  // A first chunk of 64 KiB set: the ramp it asks for up to the usual 1 MiB
  // chunks (4 MiB of data), not 512 KiB ones. Up 64, 128, 256, 512 KiB
  // (245,760 items an end), and the 557,056 items between the ends in
  // ceil(557,056 / 262,144) = 3 balanced chunks: 185,686 items and two of 185,685.
  fixed = o;
  fixed.first_chunk_items = 64 * KiB / 4;
  plan = sluice::plan_chunks(fixed, MiB, 4, {.kernel_bound = true});
  ASSERT_EQ(plan.chunk_count(), 11u);
  EXPECT_EQ(plan.chunk(0).size(), 16'384u);
  EXPECT_EQ(plan.chunk(3).size(), 131'072u);
  EXPECT_EQ(plan.chunk(4), (ItemRange{245'760, 431'446}));
  EXPECT_EQ(plan.chunk_items(), 185'686u);
  EXPECT_EQ(plan.chunk(10), (ItemRange{1'032'192, 1'048'576}));
  // Kernels in chunk order (one stream) ramp at 4 MiB; replayed runs keep their own ramp;
  // copy-bound runs their equal usual chunks.
  EXPECT_TRUE(sluice::plan_chunks({}, MiB, 4, {.kernel_bound = true}).is_ramped());
  EXPECT_EQ(sluice::plan_chunks(o, MiB, 4, {.kernel_bound = true, .replayed = true}).chunk(0).size() * 4, 64 * KiB);
  EXPECT_EQ(sluice::plan_chunks(o, MiB, 4).chunk_items() * 4, MiB);
  // The rule is the options': an explicit single stream is not overlapping.
  o.compute_streams = 1;
  EXPECT_TRUE(sluice::plan_chunks(o, MiB, 4, {.kernel_bound = true}).is_ramped());
}

TEST(DefaultChunking, ReplayedRunsRampFromASixteenthOfTheChunk) {
  constexpr std::size_t KiB = 1024, MiB = KiB * KiB;
  sluice::PipelineOptions o;
  // 4 MiB of floats: from 64 KiB (a sixteenth of 1 MiB) by doubling up to
  // 1 MiB and back down (the middle's chunks balanced, no larger).
  auto plan = sluice::plan_chunks(o, MiB, 4, {.kernel_bound = true, .replayed = true});
  ASSERT_TRUE(plan.is_ramped());
  EXPECT_EQ(plan.chunk(0).size() * 4, 64 * KiB);
  EXPECT_EQ(plan.chunk(1).size() * 4, 128 * KiB);
  EXPECT_EQ(plan.chunk(plan.chunk_count() - 1).size() * 4, 64 * KiB);
  EXPECT_LE(plan.chunk_items() * 4, MiB);
  EXPECT_GT(plan.chunk_items() * 4, 512 * KiB);
  // 64 MiB: the usual 4 MiB chunks, from 256 KiB.
  plan = sluice::plan_chunks(o, 16 * MiB, 4, {.kernel_bound = true, .replayed = true});
  EXPECT_LE(plan.chunk_items() * 4, 4 * MiB);
  EXPECT_GT(plan.chunk_items() * 4, 2 * MiB);
  EXPECT_EQ(plan.chunk(0).size() * 4, 256 * KiB);
  // 2 MiB, one chunk otherwise: from 64 KiB to 1 MiB.
  plan = sluice::plan_chunks(o, MiB / 2, 4, {.kernel_bound = true, .replayed = true});
  EXPECT_EQ(plan.chunk(0).size() * 4, 64 * KiB);
  EXPECT_LE(plan.chunk_items() * 4, MiB);
  // A replayed run whose kernels do not dominate keeps the usual equal chunks.
  // 64 MiB: sqrt(64 MiB x 0.25 MiB) = 4 MiB chunks, sixteen of them.
  plan = sluice::plan_chunks(o, 16 * MiB, 4, {.replayed = true});
  EXPECT_FALSE(plan.is_ramped());
  EXPECT_EQ(plan.chunk_items() * 4, 4 * MiB);
  EXPECT_EQ(plan.chunk_count(), 16u);
}
