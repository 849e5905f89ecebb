#include "noise.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

using namespace sluice::bench;

TEST(BenchNoise, SpreadIsTheInterquartileRangeOverTheMedian) {
  const std::vector<double> runs{10, 12, 11, 13, 9};  // sorted 9 10 11 12 13
  const Spread s = spread_of(runs);
  EXPECT_DOUBLE_EQ(s.median, 11);
  EXPECT_DOUBLE_EQ(s.q25, 10);
  EXPECT_DOUBLE_EQ(s.q75, 12);
  EXPECT_DOUBLE_EQ(s.relative, 2.0 / 11);
}

TEST(BenchNoise, TooFewRunsHaveNoSpreadAndResolveNothing) {
  const std::vector<double> one{5}, two{5, 6}, many{1, 1, 1};
  EXPECT_DOUBLE_EQ(spread_of(two).relative, 0);
  const Lead lead = lead_of(two, many);
  EXPECT_FALSE(lead.resolvable.has_value());
  EXPECT_FALSE(lead.resolved);
  EXPECT_DOUBLE_EQ(lead_of(one, one).ratio, 1);
  EXPECT_THROW(spread_of(std::vector<double>{}), std::invalid_argument);
}

TEST(BenchNoise, SeparateMiddleHalvesResolveTheLeadEitherWay) {
  const std::vector<double> fast{10.0, 10.1, 10.2, 10.1, 10.0}, slow{11.0, 11.1, 11.2, 11.1, 11.0};
  const Lead ahead = lead_of(fast, slow);
  EXPECT_NEAR(ahead.ratio, 11.1 / 10.1, 1e-12);
  EXPECT_TRUE(ahead.resolved);
  const Lead behind = lead_of(slow, fast);
  EXPECT_LT(behind.ratio, 1);
  EXPECT_TRUE(behind.resolved);
  ASSERT_TRUE(ahead.resolvable.has_value());
  EXPECT_LT(*ahead.resolvable, ahead.ratio - 1);  // resolved: the lead is larger than what the spreads hide
}

TEST(BenchNoise, OverlappingMiddleHalvesAreLevelAndSayWhatCouldBeTold) {
  // 1% apart in the medians, with a 4% spread each: level.
  const std::vector<double> a{98, 99, 100, 101, 102}, b{99, 100, 101, 102, 103};
  const Lead lead = lead_of(a, b);
  EXPECT_FALSE(lead.resolved);
  ASSERT_TRUE(lead.resolvable.has_value());
  // a's slow half (101 - 100) and b's fast half (101 - 100), over a's median.
  EXPECT_NEAR(*lead.resolvable, 2.0 / 100, 1e-12);
  EXPECT_GT(*lead.resolvable, lead.ratio - 1);
  EXPECT_EQ(describe(lead), "1.010x, level (resolvable 2.0%)");
}

TEST(BenchNoise, DescribeSaysResolvedOrTooFew) {
  Lead lead;
  lead.ratio = 1.25;
  EXPECT_EQ(describe(lead), "1.250x, too few runs to tell");
  lead.resolvable = 0.01;
  lead.resolved = true;
  EXPECT_EQ(describe(lead), "1.250x, resolved");
}

TEST(BenchNoise, SmallSizesGetMoreRoundsUpToEightTimes) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  EXPECT_EQ(rounds_for(4 * MiB, 5), 40);
  EXPECT_EQ(rounds_for(32 * MiB, 5), 40);
  EXPECT_EQ(rounds_for(64 * MiB, 5), 20);
  EXPECT_EQ(rounds_for(128 * MiB, 5), 10);
  EXPECT_EQ(rounds_for(256 * MiB, 5), 5);
  EXPECT_EQ(rounds_for(4096 * MiB, 5), 5);
  EXPECT_EQ(rounds_for(4, 1), 8);
  EXPECT_EQ(rounds_for(0, 2), 16);
}
