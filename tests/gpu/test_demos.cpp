#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "demo.hpp"
#include "gpu_test.hpp"
#include "sluice/core/device.hpp"

namespace {
std::vector<std::string> tested_demos() {
  return {"pinned-vs-pageable", "sync-vs-streams", "triple-buffer", "events", "concurrent-kernels",
          "priorities",         "callbacks",       "default-stream", "unified-memory", "copy-engines", "prefetch",
          "nccl-overlap",       "pipeline-parallel"};
}
}  // namespace

class DemoTest : public sluice::test::GpuTest, public ::testing::WithParamInterface<std::string> {};

// Each demo at a small size: it must verify its result and draw a conclusion.
TEST_P(DemoTest, VerifiesItsResultAtASmallSize) {
  for (const auto& d : sluice::demo::all_demos()) {
    if (d.name != GetParam()) continue;
    sluice::demo::DemoOptions o;
    o.size = std::size_t{8} << 20;
    o.repeats = 1;
    const auto r = d.run(o);
    if (!r.skipped.empty()) {
      // Only the multi-GPU demos may decline, and only with a reason.
      ASSERT_TRUE(d.name == "nccl-overlap" || d.name == "pipeline-parallel") << r.skipped;
      if (d.name == "pipeline-parallel") {
        ASSERT_LT(sluice::Device::count(), 2) << r.skipped;
      }
      GTEST_SKIP() << r.skipped;
    }
    EXPECT_TRUE(r.verified) << r.verification;
    EXPECT_EQ(r.name, d.name);
    EXPECT_FALSE(r.rows.empty());
    EXPECT_FALSE(r.conclusion.empty());
    for (const auto& row : r.rows) EXPECT_EQ(row.size(), r.header.size());
    if (d.name == "sync-vs-streams") {
      // The timelines: synchronous is one bar per lane, the staircase three per stream.
      ASSERT_EQ(r.traces.size(), 3u);
      EXPECT_EQ(r.traces[0].intervals.size(), 3u);
      EXPECT_EQ(r.traces[1].intervals.size(), 12u);
      EXPECT_GT(r.traces[2].intervals.size(), 3u);
      for (const auto& t : r.traces) EXPECT_TRUE(t.bound_ms.has_value());
    }
    return;
  }
  FAIL() << "no demo named " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(AllDemos, DemoTest, ::testing::ValuesIn(tested_demos()),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(DemoRegistry, EveryDemoIsTestedUnderItsName) {
  // The list the tests above are instantiated with, in the order `sluice demo` runs them.
  std::vector<std::string> names;
  for (const auto& d : sluice::demo::all_demos()) names.push_back(d.name);
  EXPECT_EQ(names, tested_demos());
}
