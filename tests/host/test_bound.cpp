#include "sluice/bound.hpp"

#include <gtest/gtest.h>

using sluice::compute_bound;
using sluice::EngineRates;
using sluice::RunVolume;

namespace {
EngineRates h200_like() {
  EngineRates r;
  r.h2d_gbps = 55;
  r.d2h_gbps = 55;
  r.both_gbps = 100;
  r.stage_in_gbps = 66;
  r.stage_out_gbps = 150;
  r.stage_both_gbps = 88;
  r.read_gbps = 99;
  r.write_gbps = 5.5;
  return r;
}
}  // namespace

TEST(Bound, SlowestEngineWins) {
  RunVolume v;
  v.h2d_bytes = 550e6;  // 10 ms at 55 GB/s
  v.kernel_ms = 30;
  auto b = compute_bound(v, h200_like());
  EXPECT_DOUBLE_EQ(b.ms, 30);
  EXPECT_EQ(b.limiter, "kernel");
  ASSERT_EQ(b.terms.size(), 2u);
  EXPECT_EQ(b.terms[1].name, "h2d");
  EXPECT_DOUBLE_EQ(b.terms[1].ms, 10);
}

TEST(Bound, SharedLinkCanBeTheLimit) {
  // 550 MB each way at 55 GB/s alone is 10 ms each, but both at once at
  // 100 GB/s take 11 ms: the link, not either copy engine, is the limit.
  RunVolume v;
  v.h2d_bytes = v.d2h_bytes = 550e6;
  v.kernel_ms = 1;
  auto b = compute_bound(v, h200_like());
  EXPECT_DOUBLE_EQ(b.ms, 11);
  EXPECT_EQ(b.limiter, "link (both directions)");
}

TEST(Bound, StagedBytesMakeTheHostAnEngine) {
  // vadd over pageable arrays: 2 GB staged in, 1 GB staged out. Both
  // directions share the staging threads: 3 GB at 70 GB/s = 42.9 ms, more
  // than the H2D engine's 36.4 ms.
  RunVolume v;
  v.h2d_bytes = v.staged_in_bytes = 2e9;
  v.d2h_bytes = v.staged_out_bytes = 1e9;
  v.kernel_ms = 5;
  EngineRates r = h200_like();
  r.stage_both_gbps = 70;
  auto b = compute_bound(v, r);
  EXPECT_EQ(b.limiter, "host staging");
  EXPECT_NEAR(b.ms, 3e9 / 70e6, 1e-9);
  EXPECT_NEAR(b.terms[1].ms, 2e9 / 55e6, 1e-9);
  EXPECT_TRUE(b.host_limited());
}

TEST(Bound, OneStagingDirectionUsesItsOwnRate) {
  RunVolume v;
  v.h2d_bytes = v.staged_in_bytes = 6.6e9;  // 100 ms at 66 GB/s, 120 ms at 55 GB/s
  auto b = compute_bound(v, h200_like());
  EXPECT_EQ(b.limiter, "h2d");
  EXPECT_DOUBLE_EQ(b.ms, 120);
  EXPECT_DOUBLE_EQ(b.terms[1].ms, 100);
}

TEST(Bound, StorageTerms) {
  RunVolume v;
  v.read_bytes = v.h2d_bytes = 1.1e9;
  v.d2h_bytes = v.written_bytes = 1.1e9;
  auto b = compute_bound(v, h200_like());
  EXPECT_EQ(b.limiter, "storage write");
  EXPECT_DOUBLE_EQ(b.ms, 200);
}

TEST(Bound, UnknownRatesLeaveTheirTermsOut) {
  RunVolume v;
  v.h2d_bytes = v.d2h_bytes = 1e9;
  EngineRates r;
  r.h2d_gbps = 50;
  auto b = compute_bound(v, r);
  ASSERT_EQ(b.terms.size(), 1u);
  EXPECT_DOUBLE_EQ(b.ms, 20);
}

TEST(Bound, NothingKnownIsNoBound) {
  auto b = compute_bound({}, {});
  EXPECT_TRUE(b.terms.empty());
  EXPECT_EQ(b.ms, 0);
}

TEST(Bound, RejectsNegativeVolumesOrRates) {
  RunVolume v;
  v.kernel_ms = -1;
  EXPECT_THROW(compute_bound(v, {}), std::invalid_argument);
  EngineRates r;
  r.h2d_gbps = -5;
  EXPECT_THROW(compute_bound({}, r), std::invalid_argument);
}

TEST(Bound, Efficiency) {
  EXPECT_DOUBLE_EQ(sluice::efficiency(9, 10), 0.9);
  EXPECT_DOUBLE_EQ(sluice::efficiency(9, 0), 0.0);
}
