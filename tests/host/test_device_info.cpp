#include "sluice/core/device_info.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace {
sluice::DeviceInfo h100_like() {
  sluice::DeviceInfo d;
  d.name = "H100";
  d.sm_count = 132;
  d.async_engine_count = 3;
  d.concurrent_kernels = true;
  d.unified_addressing = true;
  d.least_stream_priority = 0;
  d.greatest_stream_priority = -5;
  d.total_memory_bytes = std::size_t{80} << 30;
  d.free_memory_bytes = std::size_t{79} << 30;
  return d;
}
bool mentions(const std::vector<std::string>& notes, const std::string& text) {
  return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; });
}
}  // namespace

TEST(OverlapNotes, ThreeCopyEnginesOverlapBothDirections) {
  auto notes = sluice::overlap_notes(h100_like());
  EXPECT_TRUE(mentions(notes, "3 copy engines: H2D and D2H can run at once"));
  EXPECT_TRUE(mentions(notes, "132 SMs"));
  EXPECT_TRUE(mentions(notes, "6 stream priority levels (-5 highest .. 0 lowest)"));
  EXPECT_TRUE(mentions(notes, "PCIe link: not reported"));
}

TEST(OverlapNotes, OneCopyEngineTakesTurns) {
  auto d = h100_like();
  d.async_engine_count = 1;
  d.least_stream_priority = d.greatest_stream_priority = 0;
  d.concurrent_kernels = false;
  auto notes = sluice::overlap_notes(d);
  EXPECT_TRUE(mentions(notes, "H2D and D2H take turns"));
  EXPECT_TRUE(mentions(notes, "one stream priority level"));
  EXPECT_TRUE(mentions(notes, "no concurrent kernels"));
  EXPECT_FALSE(mentions(notes, "can run at once"));
}

TEST(OverlapNotes, ReportsPcieLinkWhenKnown) {
  auto d = h100_like();
  d.pcie_link = sluice::PcieLink{"32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16};
  EXPECT_TRUE(mentions(sluice::overlap_notes(d), "PCIe link 32.0 GT/s PCIe x16: about 63 GB/s"));
}
