#include "sluice/bound.hpp"

#include <gtest/gtest.h>

using sluice::compute_bound;
using sluice::StageCosts;

TEST(Bound, SlowestEngineWins) {
  StageCosts c;
  c.h2d_ms = 10;
  c.kernel_ms = 30;
  c.d2h_ms = 12;
  auto b = compute_bound(c);
  EXPECT_DOUBLE_EQ(b.ms, 30);
  EXPECT_EQ(b.limiter, "kernel");
}

TEST(Bound, SharedLinkCanBeTheLimit) {
  // 550 MB each way at 55 GB/s alone is 10 ms each, but both at once at
  // 80 GB/s take 13.75 ms: the link, not either copy engine, is the limit.
  StageCosts c;
  c.h2d_ms = 10;
  c.d2h_ms = 10;
  c.kernel_ms = 1;
  c.h2d_bytes = 550e6;
  c.d2h_bytes = 550e6;
  c.bidirectional_gbps = 80;
  auto b = compute_bound(c);
  EXPECT_DOUBLE_EQ(b.ms, 13.75);
  EXPECT_EQ(b.limiter, "link (both directions)");
}

TEST(Bound, UnknownBidirectionalRateIsIgnored) {
  StageCosts c;
  c.h2d_ms = 4;
  c.h2d_bytes = 1e9;
  c.d2h_bytes = 1e9;
  EXPECT_DOUBLE_EQ(compute_bound(c).ms, 4);
}

TEST(Bound, RejectsNegativeCosts) {
  StageCosts c;
  c.kernel_ms = -1;
  EXPECT_THROW(compute_bound(c), std::invalid_argument);
}

TEST(Bound, Efficiency) {
  EXPECT_DOUBLE_EQ(sluice::efficiency(9, 10), 0.9);
  EXPECT_DOUBLE_EQ(sluice::efficiency(9, 0), 0.0);
}
