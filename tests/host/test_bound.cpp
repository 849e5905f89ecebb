#include "sluice/bound/bound.hpp"

#include <gtest/gtest.h>

#include <algorithm>

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

namespace {
// Measured on an H200 (PCIe Gen5): 256:128 MiB at once in 5.0 ms.
EngineRates with_mixes() {
  EngineRates r = h200_like();
  r.h2d_heavy = {53.7, 26.85};
  r.d2h_heavy = {26.4, 52.8};
  return r;
}
}  // namespace

TEST(Bound, UnequalMixUsesTheMeasuredPoint) {
  // 2:1, as vadd moves: the link at that mix, not H2D alone (9.76 ms) nor
  // both ways (8.05 ms), sets the bound.
  RunVolume v;
  v.h2d_bytes = 2 * 268435456.0;
  v.d2h_bytes = 268435456.0;
  const auto b = compute_bound(v, with_mixes());
  EXPECT_EQ(b.limiter, "link (both directions)");
  EXPECT_NEAR(b.ms, v.h2d_bytes / 53.7e6, 1e-9);
  EXPECT_NEAR(sluice::link_ms(v.h2d_bytes, v.d2h_bytes, with_mixes()), b.ms, 1e-12);
  // Without the mixes, the outer limit of before: H2D alone.
  const auto outer = compute_bound(v, h200_like());
  EXPECT_EQ(outer.limiter, "h2d");
  EXPECT_NEAR(outer.ms, v.h2d_bytes / 55e6, 1e-9);
}

TEST(Bound, MixesBetweenMeasuredPointsTimeShare) {
  const EngineRates r = with_mixes();
  // Equal bytes: the both-ways rate, as before.
  EXPECT_NEAR(sluice::link_ms(1e9, 1e9, r), 2e9 / 100e6, 1e-9);
  // One way only: that direction alone.
  EXPECT_NEAR(sluice::link_ms(1e9, 0, r), 1e9 / 55e6, 1e-9);
  EXPECT_NEAR(sluice::link_ms(0, 1e9, r), 1e9 / 55e6, 1e-9);
  // 4:1 lies between H2D alone (55, 0) and the 2:1 point (53.7, 26.85): on
  // that segment, h = 4 d gives 55 - 1.3 t = 4 * 26.85 t.
  const double t = 55 / (4 * 26.85 + 1.3), h_rate = 55 - 1.3 * t;
  EXPECT_NEAR(sluice::link_ms(4e9, 1e9, r), 4e9 / (h_rate * 1e6), 1e-9);
  // Never below any single-direction or both-ways limit at these rates.
  for (double share : {0.1, 0.3, 0.45, 0.5, 0.6, 0.8, 0.95}) {
    const double h = share * 1e9, d = (1 - share) * 1e9;
    const double ms = sluice::link_ms(h, d, r);
    EXPECT_GE(ms + 1e-9, std::max({h / 55e6, d / 55e6, (h + d) / 100e6})) << share;
  }
  EXPECT_EQ(sluice::link_ms(0, 0, r), 0.0);
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

namespace {
// copy over pageable arrays: 1 GB staged in and copied in, 1 GB copied out and staged out.
RunVolume staged_copy() {
  RunVolume v;
  v.h2d_bytes = v.staged_in_bytes = 1e9;
  v.d2h_bytes = v.staged_out_bytes = 1e9;
  return v;
}
}  // namespace

TEST(Bound, StagingBesideTheLinkSharesHostMemory) {
  // Alone: staging 2 GB at 80 GB/s is 25 ms, the link 2 GB at 100 GB/s 20 ms.
  // Beside the link streaming at its best, staging got 40. Between staging
  // alone (80, 0) and that point (40, 100), the hull crosses equal rates at
  // 57.1 GB/s each: 2 GB / 57.1 GB/s = 35 ms.
  EngineRates r = h200_like();
  r.stage_both_gbps = 80;
  r.staging_beside_link = {40, 100};
  const auto b = compute_bound(staged_copy(), r);
  EXPECT_EQ(b.limiter, "host memory (staging beside the link)");
  EXPECT_NEAR(b.ms, 35, 1e-9);
  EXPECT_TRUE(b.host_limited());
  EXPECT_NEAR(sluice::host_memory_ms(staged_copy(), r), 35, 1e-9);
  EXPECT_NEAR(sluice::staging_ms(staged_copy(), r), 25, 1e-9);
}

TEST(Bound, SharedPointTakesTheLinkAtItsBest) {
  // The link kept 80 GB/s beside the staging threads, but its best both ways
  // is 100: the point is taken at (40, 100), so the term stays a bound.
  EngineRates r = h200_like();
  r.stage_both_gbps = 80;
  r.staging_beside_link = {40, 80};
  EXPECT_NEAR(sluice::host_memory_ms(staged_copy(), r), 35, 1e-9);
  r.staging_beside_link = {40, 120};  // faster than the link's best: taken as measured
  // (80 - 40 t, 120 t) at equal rates: t = 0.5, 60 GB/s each.
  EXPECT_NEAR(sluice::host_memory_ms(staged_copy(), r), 2e9 / 60e6, 1e-9);
}

TEST(Bound, HostMemoryTermNeedsStagingCopiesAndTheSharedPoint) {
  EngineRates r = h200_like();
  r.staging_beside_link = {40, 80};
  RunVolume pinned;
  pinned.h2d_bytes = pinned.d2h_bytes = 1e9;
  EXPECT_EQ(sluice::host_memory_ms(pinned, r), 0);
  r.staging_beside_link = {};
  EXPECT_EQ(sluice::host_memory_ms(staged_copy(), r), 0);
  const auto b = compute_bound(staged_copy(), r);
  EXPECT_TRUE(std::none_of(b.terms.begin(), b.terms.end(),
                           [](const auto& t) { return t.name == "host memory (staging beside the link)"; }));
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
