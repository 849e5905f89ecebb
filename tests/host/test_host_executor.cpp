// The host executor itself: what it holds while pipelines live, and memory
// it hands out that never shares a page with memory the caller registers.
#include "sluice/pipeline/host_executor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "sluice/pipeline/pipeline.hpp"

namespace {

using sluice::Chunk;
using sluice::HostExecutor;
using sluice::Pipeline;
using sluice::PipelineOptions;

// The host executor has no graphs: a run asked to replay is refused with the
// reason, before any slot is allocated for it, and nothing is written.
TEST(HostExecutor, RefusesAReplayedRunBeforeAnySlotIsAllocated) {
  HostExecutor host;
  std::vector<float> in(10'000, 1.0f), out(in.size(), -1.0f);
  PipelineOptions o;
  o.chunk_items = 1000;
  Pipeline p(o, host);
  const auto x = p.input(in);
  const auto y = p.output(out);
  p.compute([x, y](const Chunk& c) {
    for (std::size_t i = 0; i < c.size(); ++i) c[y][i] = c[x][i] + 1;
  }, sluice::Replay::graph);
  try {
    p.run();
    FAIL() << "the host executor replayed a run";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be replayed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(host.holdings().device_bytes, 0u) << "a refused run allocated device slots";
  EXPECT_EQ(host.holdings().pinned_bytes, 0u) << "a refused run allocated pinned slots";
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == -1.0f; })) << "a refused run wrote";
}

TEST(HostExecutor, HoldsLaneThreadsAndSlotsOnlyWhileAPipelineLives) {
  HostExecutor host;
  std::vector<float> in(10'000, 1.0f), out(in.size());
  {
    PipelineOptions o;
    o.chunk_items = 1000;
    o.kernel_order = sluice::KernelOrder::independent;  // two compute streams
    Pipeline p(o, host);
    EXPECT_EQ(host.holdings().lane_threads, 4u);  // H2D, D2H and a thread per compute stream
    const auto x = p.input(in);
    const auto y = p.output(out);
    p.compute([x, y](const Chunk& c) {
      for (std::size_t i = 0; i < c.size(); ++i) c[y][i] = c[x][i] + 1;
    });
    p.run();
    EXPECT_GE(host.holdings().device_bytes, 2 * o.depth * o.chunk_items * sizeof(float));  // the ring stays for the next run
    EXPECT_GT(host.operations_checked(), 0u);
  }
  const HostExecutor::Holdings left = host.holdings();
  EXPECT_EQ(left.lane_threads, 0u);
  EXPECT_EQ(left.device_bytes, 0u);
  EXPECT_EQ(left.pinned_bytes, 0u);
  EXPECT_EQ(left.locked_ranges, 0u);
  EXPECT_TRUE(host.violations().empty());
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == 2.0f; }));
}

// A registration page-locks whole pages, beyond the caller's bytes, as
// cudaHostRegister does. Slot memory the executor hands out later must not
// land in the spare bytes of those pages (small vectors on the heap, small
// slots): the copies would be taken for copies from unlocked memory.
TEST(HostExecutor, SlotMemoryNeverLandsInARegisteredPage) {
  for (std::size_t round = 0; round < 50; ++round) {
    HostExecutor host;
    const std::size_t n = 500 + 37 * round;
    std::vector<float> in(n, 1.5f), out(n, std::nanf(""));
    PipelineOptions o;
    o.chunk_items = 64;
    o.depth = 4;
    o.host_memory = sluice::HostMemoryPolicy::register_memory;
    Pipeline p(o, host);
    const auto x = p.input(in);
    const auto y = p.output(out);
    p.compute([x, y](const Chunk& c) {
      for (std::size_t i = 0; i < c.size(); ++i) c[y][i] = c[x][i] * 2;
    });
    ASSERT_NO_THROW(p.run()) << "round " << round;
    ASSERT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == 3.0f; })) << "round " << round;
  }
}

}  // namespace
