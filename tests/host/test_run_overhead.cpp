#include "run_overhead.hpp"

#include <gtest/gtest.h>

#include <vector>

using namespace sluice;
using workloads::HostMarks;

TEST(RunOverhead, FromTheCallToTheFirstCopyAndFromTheLastCopyToTheReturn) {
  const std::vector<StageInterval> run{
      {Lane::h2d, 0, 0.30, 1.00, 0, 0, -1},     {Lane::compute, 0, 1.00, 1.50, 0, 0, -1},
      {Lane::d2h, 0, 1.50, 2.00, 0, 0, -1},     {Lane::h2d, 1, 1.00, 1.70, 0, 0, -1},
      {Lane::compute, 1, 1.70, 2.60, 0, 0, -1},  // a kernel after the last copy does not count as one
      {Lane::d2h, 1, 2.10, 2.50, 0, 0, -1}};
  const HostMarks host{0.10, 0.14, 2.75};
  const auto o = workloads::overhead_of(run, host);
  ASSERT_TRUE(o.has_value());
  EXPECT_NEAR(o->start_ms, 0.20, 1e-12);
  EXPECT_NEAR(o->end_ms, 0.25, 1e-12);
  EXPECT_NEAR(o->host_us_per_chunk, 1000 * 0.04 / 2, 1e-9);  // two chunks enqueued in 40 us
}

TEST(RunOverhead, NoCopiesNoCosts) {
  const std::vector<StageInterval> kernels_only{{Lane::compute, 0, 0.1, 0.2, 0, 0, -1}};
  EXPECT_FALSE(workloads::overhead_of(kernels_only, {}).has_value());
}

TEST(RunOverhead, MedianFigureByFigureAndUnfilledReports) {
  const std::vector<RunReport::Overhead> runs{{0.1, 0.9, 5}, {0.3, 0.2, 7}, {0.2, 0.4, 6}};
  const auto m = workloads::median_overhead(runs);
  ASSERT_TRUE(m.has_value());
  EXPECT_DOUBLE_EQ(m->start_ms, 0.2);
  EXPECT_DOUBLE_EQ(m->end_ms, 0.4);
  EXPECT_DOUBLE_EQ(m->host_us_per_chunk, 6);
  EXPECT_FALSE(workloads::median_overhead({}).has_value());
  EXPECT_FALSE(workloads::filled(RunReport::Overhead{}));
  EXPECT_TRUE(workloads::filled(RunReport::Overhead{0, 0, 1}));
}
