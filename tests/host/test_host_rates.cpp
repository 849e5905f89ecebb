// The host staging rates over the caller's memory: every byte of each region
// is copied, a missing region leaves its figures out, and the faster of two
// measurements is taken figure by figure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "bound/host_rates.hpp"

using sluice::HostCopyRates;
using sluice::HostRegions;

TEST(HostRates, CopiesThroughTheCallersRegions) {
  sluice::StagingPool pool(2);
  std::vector<std::byte> in(3'000'001, std::byte{0x5A}), out(5'000'003, std::byte{0});
  const HostCopyRates r = sluice::measure_host_copy_rates(pool, HostRegions{in.data(), in.size(), out.data(), out.size()}, 1);
  EXPECT_GT(r.stage_in_gbps, 0);
  EXPECT_GT(r.stage_out_gbps, 0);
  EXPECT_GT(r.both_gbps, 0);
  EXPECT_EQ(r.threads, 2u);
  // Stage-out wrote the slot ring's bytes over the whole output region.
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](std::byte b) { return b == std::byte{0x11}; }));
  EXPECT_TRUE(std::all_of(in.begin(), in.end(), [](std::byte b) { return b == std::byte{0x5A}; }));
}

TEST(HostRates, UsesTheRingItIsGivenAndRefusesOneOfPartPieces) {
  sluice::StagingPool pool(2);
  std::vector<std::byte> in(3 << 20, std::byte{0x5A}), out(3 << 20, std::byte{0});
  std::vector<std::byte> ring_in(2 << 20, std::byte{0}), ring_out(2 << 20, std::byte{0x77});
  const HostRegions regions{in.data(), in.size(), out.data(), out.size()};
  sluice::measure_host_copy_rates(pool, regions, 1, sluice::SlotRing{ring_in.data(), ring_out.data(), ring_in.size()});
  // Stage-in wrote the caller's bytes into the given ring; stage-out copied the ring's out.
  EXPECT_TRUE(std::all_of(ring_in.begin(), ring_in.end(), [](std::byte b) { return b == std::byte{0x5A}; }));
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](std::byte b) { return b == std::byte{0x77}; }));
  EXPECT_THROW(sluice::measure_host_copy_rates(pool, regions, 1,
                                               sluice::SlotRing{ring_in.data(), ring_out.data(), (3 << 20) / 2}),
               std::invalid_argument);
}

TEST(HostRates, AMissingRegionLeavesItsFiguresOut) {
  sluice::StagingPool pool(2);
  std::vector<std::byte> in(1 << 20, std::byte{1});
  const HostCopyRates r = sluice::measure_host_copy_rates(pool, HostRegions{in.data(), in.size(), nullptr, 0}, 1);
  EXPECT_GT(r.stage_in_gbps, 0);
  EXPECT_EQ(r.stage_out_gbps, 0);
  EXPECT_EQ(r.both_gbps, 0);
}

TEST(HostRates, FastestOfTakesEachFigureFromWhicheverWasFaster) {
  const HostCopyRates a{48, 90, 50, 14}, b{52, 80, 49, 14};
  const HostCopyRates f = sluice::fastest_of(a, b);
  EXPECT_EQ(f.stage_in_gbps, 52);
  EXPECT_EQ(f.stage_out_gbps, 90);
  EXPECT_EQ(f.both_gbps, 50);
  EXPECT_EQ(f.threads, 14u);
}
