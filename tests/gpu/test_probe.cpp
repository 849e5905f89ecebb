#include "sluice/probe.hpp"

#include "gpu_test.hpp"

class ProbeTest : public sluice::test::GpuTest {};

TEST_F(ProbeTest, SmallProbeMeasuresEveryRow) {
  sluice::ProbeOptions o;
  o.min_bytes = 64 << 10;
  o.max_bytes = 1 << 20;
  o.repeats = 3;
  o.max_host_threads = 2;
  auto r = sluice::run_probe(o);
  EXPECT_EQ(r.transfers.size(), 3u * 8u);  // 64 KiB, 256 KiB, 1 MiB x 8 kinds of copy
  EXPECT_EQ(r.registration.size(), 3u * 2u);
  EXPECT_EQ(r.host_copies.size(), 2u);
  EXPECT_EQ(r.fixed_costs.size(), 6u);
  for (const auto& m : r.transfers) {
    EXPECT_GT(m.ms.median, 0.0) << m.name;
    EXPECT_GT(m.median_gbps(), 0.0) << m.name;
  }
}

TEST_F(ProbeTest, RejectsBadSizes) {
  sluice::ProbeOptions o;
  o.min_bytes = 0;
  EXPECT_THROW(sluice::run_probe(o), std::invalid_argument);
  o.min_bytes = 2 << 20;
  o.max_bytes = 1 << 20;
  EXPECT_THROW(sluice::run_probe(o), std::invalid_argument);
}
