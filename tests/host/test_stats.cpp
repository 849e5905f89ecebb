#include "sluice/measure/stats.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

using sluice::percentile;
using sluice::summarize;

TEST(Stats, MedianOfOddAndEvenSamples) {
  std::vector<double> odd{5, 1, 3};
  std::vector<double> even{4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(summarize(odd).median, 3.0);
  EXPECT_DOUBLE_EQ(summarize(even).median, 2.5);
}

TEST(Stats, SummaryIsOrderIndependentAndBoundsAreExtremes) {
  std::vector<double> samples{9, 2, 7, 4, 1, 8};
  auto s = summarize(samples);
  EXPECT_EQ(s.count, 6u);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 9);
  EXPECT_LE(s.p10, s.median);
  EXPECT_LE(s.median, s.p90);
  EXPECT_LE(s.p90, s.p99);
}

TEST(Stats, PercentileInterpolatesBetweenRanks) {
  std::vector<double> samples{0, 10};
  EXPECT_DOUBLE_EQ(percentile(samples, 0.25), 2.5);
  EXPECT_DOUBLE_EQ(percentile(samples, 1.0), 10);
}

TEST(Stats, OneOutlierDoesNotMoveTheMedian) {
  std::vector<double> samples{1, 1, 1, 1, 1000};
  EXPECT_DOUBLE_EQ(summarize(samples).median, 1);
}

TEST(Stats, RejectsEmptySamplesAndBadRanks) {
  std::vector<double> empty;
  std::vector<double> one{1};
  EXPECT_THROW(summarize(empty), std::invalid_argument);
  EXPECT_THROW(percentile(one, 1.5), std::invalid_argument);
  EXPECT_THROW(percentile(one, -0.1), std::invalid_argument);
}

TEST(Stats, GigabytesPerSecond) {
  EXPECT_DOUBLE_EQ(sluice::gb_per_s(1e9, 1000), 1.0);
  EXPECT_DOUBLE_EQ(sluice::gb_per_s(55e6, 1), 55.0);
  EXPECT_DOUBLE_EQ(sluice::gb_per_s(1e9, 0), 0.0);
}
