#include "sluice/measure/probe.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "gpu_test.hpp"

class ProbeTest : public sluice::test::GpuTest {};

TEST_F(ProbeTest, SmallProbeMeasuresEveryRow) {
  sluice::ProbeOptions o;
  o.min_bytes = 64 << 10;
  o.max_bytes = 1 << 20;
  o.repeats = 3;
  o.max_host_threads = 2;
  auto r = sluice::run_probe(o);
  EXPECT_EQ(r.transfers.size(), 3u * 10u);  // 64 KiB, 256 KiB, 1 MiB x 10 kinds of copy
  // Both ways at 2:1 moves one and a half times the size.
  const auto mix = std::find_if(r.transfers.begin(), r.transfers.end(),
                                [](const sluice::Measurement& m) { return m.name == "both ways 2:1 pinned"; });
  ASSERT_NE(mix, r.transfers.end());
  EXPECT_EQ(mix->moved_bytes(), mix->bytes + mix->bytes / 2);
  EXPECT_EQ(r.registration.size(), 3u * 2u);
  // Host copies with 1 and 2 threads, then the staging rates the model reads back.
  std::vector<std::string> host;
  for (const auto& m : r.host_copies) host.push_back(m.name + "/" + std::to_string(m.threads));
  ASSERT_EQ(host.size(), 7u);
  EXPECT_EQ(host[0], "host memcpy/1");
  EXPECT_EQ(host[1], "host memcpy/2");
  EXPECT_EQ(r.host_copies[2].name, "stage in");
  EXPECT_EQ(r.host_copies[3].name, "stage out");
  EXPECT_EQ(r.host_copies[4].name, "stage both");
  // Staging beside the link's copies, and what the link moved meanwhile: the shared point the bound reads back.
  EXPECT_EQ(r.host_copies[5].name, "stage both beside the link");
  EXPECT_EQ(r.host_copies[6].name, "link beside staging");
  for (const auto& m : r.host_copies) EXPECT_GT(m.median_gbps(), 0.0) << m.name;
  std::vector<std::string> fixed;
  for (const auto& m : r.fixed_costs) fixed.push_back(m.name);
  EXPECT_EQ(fixed, (std::vector<std::string>{"kernel launch (submit)", "kernel launch to completion",
                                             "cudaMemcpyAsync submit (4 B pinned)", "event record", "cudaStreamWaitEvent",
                                             "model: copy latency", "model: kernel start after its event",
                                             "model: blocked thread wake-up", "model: host work per chunk",
                                             "model: staging job hand-off", "model: a run's own start and end",
                                             "host function round trip"}));
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
