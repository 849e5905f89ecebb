// What each edge of the schedule guards, shown on the host executor: a run
// under pressure is right with every edge kept, and fails, the executor
// naming the broken edge, once the driver and the lanes leave one kind of
// edge out (HostExecutor::ignore_edges). The pressure holds one operation
// back; where the edge is left out, it holds it until the executor has seen
// the schedule broken, so the outcome does not hang on timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "host_backend.hpp"
#include "pipeline_test.hpp"

namespace sluice::test {

namespace {

// Holds the operation it is called in: 20 ms with every edge kept; until the
// executor sees the schedule broken (10 s at most) with an edge left out.
struct Hold {
  const HostExecutor* executor;
  bool until_broken;
  void operator()() const {
    using namespace std::chrono;
    if (!until_broken) {
      std::this_thread::sleep_for(milliseconds(20));
      return;
    }
    const auto deadline = steady_clock::now() + seconds(10);
    while (executor->violations().empty() && steady_clock::now() < deadline)
      std::this_thread::sleep_for(microseconds(100));
  }
};

// Builds a pipeline on the backend, runs it with `hold` somewhere in it, and
// says whether its outputs are right; throws what the run throws.
using Scenario = std::function<bool(HostBackend&, const Hold&)>;

// The edges of kind `why` (of operations of `stage` only, when given) are what keeps `scenario` right.
void expect_guarded(Reason why, std::optional<Stage> stage, const Scenario& scenario) {
  {
    SCOPED_TRACE("every edge kept");
    HostBackend backend;
    bool right = false;
    EXPECT_NO_THROW(right = scenario(backend, Hold{&backend.executor(), false}));
    EXPECT_TRUE(right);
    backend.expect_clean();
  }
  SCOPED_TRACE(std::string("without the ") + std::string(to_string(why)) + " edges");
  HostBackend backend;
  backend.executor().ignore_edges(
      [why, stage](const Op& op, const Edge& edge) { return !(edge.why == why && (!stage || op.ref.stage == *stage)); });
  try {
    scenario(backend, Hold{&backend.executor(), true});
    ADD_FAILURE() << "the run succeeded";
  } catch (const HostExecutorError& e) {
    EXPECT_NE(std::string(e.what()).find("saw the schedule broken"), std::string::npos) << e.what();
  }
  const auto seen = backend.executor().violations();
  std::string named = "(";  // appended, not `"(" + ...`: GCC 12 warns falsely (-Wrestrict) on that form
  named.append(to_string(why)).append(")");
  EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [&](const std::string& v) { return v.find(named) != std::string::npos; }))
      << "no violation names the " << named << " edge; the first: " << (seen.empty() ? "none" : seen.front());
  const HostExecutor::Holdings left = backend.executor().holdings();
  EXPECT_EQ(left.device_bytes + left.pinned_bytes + left.locked_ranges + left.lane_threads, 0u) << "a failed run left memory or threads";
}

PipelineOptions chunks_of_1000(std::size_t depth) {
  PipelineOptions o;
  o.chunk_items = 1000;
  o.depth = depth;
  o.host_memory = HostMemoryPolicy::stage;
  o.staging_threads = 2;
  return o;
}

// Pinned in and out, y = 2x + 1; `hold` in the compute of chunk 0.
bool pinned_run(HostBackend& b, const Hold& hold, PipelineOptions o, std::size_t chunks) {
  const auto values = pattern(1000 * chunks);
  auto in = b.pinned<float>(values.size()), out = b.pinned<float>(values.size());
  std::copy(values.begin(), values.end(), in.begin());
  std::fill(out.begin(), out.end(), std::nanf(""));
  Pipeline p = b.pipeline(o);
  const auto x = p.input(in.span());
  const auto y = p.output(out.span());
  p.compute([&, x, y](const Chunk& c) {
    if (c.index == 0) hold();
    b.affine(c, c[x].data(), c[y].data(), 2, 1);
  });
  p.run();
  return is_affine(values, out.span());
}

}  // namespace

// H2D of chunk c waits for the D2H of chunk c - depth: the device slot's last reader.
TEST(ScheduleEdges, TheDeviceSlotEdgeKeepsAnH2DOffASlotStillInUse) {
  expect_guarded(Reason::device_slot, std::nullopt,
                 [](HostBackend& b, const Hold& hold) { return pinned_run(b, hold, chunks_of_1000(2), 8); });
}

TEST(ScheduleEdges, TheDataEdgeKeepsAComputeAfterItsH2D) {
  // Two compute streams: chunk 1's compute has nothing else to wait for,
  // while its H2D waits for chunk 0 (held) to leave the only device slot.
  expect_guarded(Reason::data, Stage::compute, [](HostBackend& b, const Hold& hold) {
    PipelineOptions o = chunks_of_1000(1);
    o.kernel_order = KernelOrder::independent;
    return pinned_run(b, hold, o, 8);
  });
}

TEST(ScheduleEdges, TheDataEdgeKeepsAD2HAfterItsCompute) {
  expect_guarded(Reason::data, Stage::d2h,
                 [](HostBackend& b, const Hold& hold) { return pinned_run(b, hold, chunks_of_1000(2), 8); });
}

TEST(ScheduleEdges, TheDataEdgeKeepsAnH2DAfterItsStageIn) {
  // A source whose first chunk is slow to come.
  expect_guarded(Reason::data, Stage::h2d, [](HostBackend& b, const Hold& hold) {
    const std::size_t n = 8000;
    auto out = b.pinned<float>(n);
    std::fill(out.begin(), out.end(), std::nanf(""));
    Pipeline p = b.pipeline(chunks_of_1000(2));
    const auto x = p.input(produce<float>(n, [&](ItemRange r, std::span<float> items) {
      if (r.begin == 0) hold();
      for (std::size_t i = 0; i < items.size(); ++i) items[i] = static_cast<float>(r.begin + i);
    }));
    const auto y = p.output(out.span());
    p.compute([&, x, y](const Chunk& c) { b.affine(c, c[x].data(), c[y].data(), 2, 1); });
    p.run();
    for (std::size_t i = 0; i < n; ++i)
      if (!(out[i] == static_cast<float>(i) * 2 + 1)) return false;
    return true;
  });
}

// Stage-in of chunk c waits for the H2D of chunk c - (stage-in slots): the pinned slot's last reader.
TEST(ScheduleEdges, ThePinnedInSlotEdgeKeepsAStageInOffASlotStillBeingCopied) {
  expect_guarded(Reason::pinned_in_slot, std::nullopt, [](HostBackend& b, const Hold& hold) {
    const auto in = pattern(16'000);
    auto out = b.pinned<float>(in.size());
    std::fill(out.begin(), out.end(), std::nanf(""));
    Pipeline p = b.pipeline(chunks_of_1000(1));
    const auto x = p.input(in);  // staged
    const auto y = p.output(out.span());
    p.compute([&, x, y](const Chunk& c) {
      if (c.index == 0) hold();
      b.affine(c, c[x].data(), c[y].data(), 2, 1);
    });
    p.run();
    return is_affine(in, out.span());
  });
}

// D2H of chunk c waits for the stage-out of chunk c - (depth + 1): the pinned slot's last reader.
TEST(ScheduleEdges, ThePinnedOutSlotEdgeKeepsAD2HOffASlotNotYetStagedOut) {
  expect_guarded(Reason::pinned_out_slot, std::nullopt, [](HostBackend& b, const Hold& hold) {
    const auto values = pattern(8000);
    auto in = b.pinned<float>(values.size());
    std::copy(values.begin(), values.end(), in.begin());
    std::vector<float> out(values.size(), std::nanf(""));
    Pipeline p = b.pipeline(chunks_of_1000(1));
    const auto x = p.input(in.span());
    const auto y = p.output(out);  // staged
    p.compute([&, x, y](const Chunk& c) { b.affine(c, c[x].data(), c[y].data(), 2, 1); });
    p.on_chunk_done([&](std::size_t index, ItemRange) {
      if (index == 0) hold();
    });
    p.run();
    return is_affine(values, out);
  });
}

// H2D of chunk c waits for the drain of chunk c - (event sets): the events' last reader.
TEST(ScheduleEdges, TheEventSetEdgeKeepsAChunkOffEventsTheDrainStillReads) {
  expect_guarded(Reason::event_set, std::nullopt, [](HostBackend& b, const Hold& hold) {
    const auto values = pattern(40'000);  // 40 chunks, more than the 32 event sets
    auto in = b.pinned<float>(values.size()), out = b.pinned<float>(values.size());
    std::copy(values.begin(), values.end(), in.begin());
    std::fill(out.begin(), out.end(), std::nanf(""));
    Pipeline p = b.pipeline(chunks_of_1000(2));
    const auto x = p.input(in.span());
    const auto y = p.output(out.span());
    p.compute([&, x, y](const Chunk& c) { b.affine(c, c[x].data(), c[y].data(), 2, 1); });
    p.on_chunk_done([&](std::size_t index, ItemRange) {
      if (index == 0) hold();
    });
    p.run();
    return is_affine(values, out.span());
  });
}

}  // namespace sluice::test
