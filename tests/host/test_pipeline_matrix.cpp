// The pipeline's logic over the host executor, for every mix of spans
// (span_mix.hpp) at every depth from 1 to 8, with chunks equal, with a
// short last one, or ramped at both ends; with the lanes jittered at odd
// depths, so that they meet in different orders. Outputs are poisoned
// first and checked item by item, every run twice over the same pipeline,
// and the executor must have seen every edge of the schedule kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "host_backend.hpp"
#include "span_mix.hpp"

namespace sluice::test {

namespace {

struct Plan {
  const char* name;
  std::size_t items, chunk_items, first_chunk_items;
};
// More chunks than the 32 event sets, so that those are reused too.
constexpr Plan equal{"equal", 24'000, 600, 0};
constexpr Plan short_last{"short_last", 23'457, 600, 0};
constexpr Plan ramped{"ramped", 40'000, 1024, 64};
// Every plan meets every mix at two or three depths, jittered and not.
Plan plan_for(std::size_t depth) {
  constexpr Plan plans[] = {equal, short_last, ramped};
  return plans[depth % 3];
}
unsigned jitter_for(std::size_t depth) { return depth % 2 == 1 ? 40 : 0; }

// The chunks the compute saw, in order, are the plan's.
::testing::AssertionResult chunks_follow(const Plan& plan, const std::vector<ItemRange>& chunks) {
  if (chunks.empty()) return ::testing::AssertionFailure() << "no chunk computed";
  std::size_t next = 0;
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    if (chunks[k].begin != next || chunks[k].size() == 0 || chunks[k].size() > plan.chunk_items)
      return ::testing::AssertionFailure() << "chunk " << k << " holds items " << chunks[k].begin << ".."
                                           << chunks[k].end << " after item " << next;
    next = chunks[k].end;
  }
  if (next != plan.items) return ::testing::AssertionFailure() << "the chunks end at item " << next;
  const std::size_t last = chunks.back().size();
  if (plan.first_chunk_items > 0) {
    if (chunks.front().size() != plan.first_chunk_items || chunks[1].size() != 2 * plan.first_chunk_items ||
        last != plan.first_chunk_items)
      return ::testing::AssertionFailure() << "not ramped from " << plan.first_chunk_items << " at both ends";
    return ::testing::AssertionSuccess();
  }
  for (std::size_t k = 0; k + 1 < chunks.size(); ++k)
    if (chunks[k].size() != plan.chunk_items) return ::testing::AssertionFailure() << "chunk " << k << " is short";
  if (last != plan.items - (chunks.size() - 1) * plan.chunk_items)
    return ::testing::AssertionFailure() << "the last chunk has " << last << " items";
  return ::testing::AssertionSuccess();
}

PipelineOptions options_for(const Mix& mix, std::size_t depth, const Plan& plan) {
  PipelineOptions o;
  o.depth = depth;
  o.chunk_items = plan.chunk_items;
  o.first_chunk_items = plan.first_chunk_items;
  o.host_memory = mix.policy;
  o.staging_threads = 2;
  return o;
}

// One mix at one depth, run twice over one pipeline on an executor of its own.
void runs_right(const Mix& mix, std::size_t depth) {
  const Plan plan = plan_for(depth);
  SCOPED_TRACE("depth " + std::to_string(depth) + ", " + plan.name + " chunks" +
               (jitter_for(depth) > 0 ? ", jittered" : ""));
  HostBackend backend({.jitter_us = jitter_for(depth), .seed = depth});
  {
    MixedSpans spans(mix, backend, plan.items);
    Pipeline p = backend.pipeline(options_for(mix, depth, plan));
    spans.add_to(p);
    // A chunk-done callable at even depths: the others leave a run with
    // nothing passing through the host to drive and drain on one thread.
    std::vector<std::size_t> done;
    bool done_ready = true;
    if (depth % 2 == 0)
      p.on_chunk_done([&](std::size_t index, ItemRange items) {
        done.push_back(index);
        done_ready = done_ready && spans.chunk_right(items);
      });
    for (int run = 0; run < 2; ++run) {
      SCOPED_TRACE("run " + std::to_string(run));
      spans.reset();
      done.clear();
      const RunReport report = run == 0 ? p.run() : p.submit().wait();
      EXPECT_TRUE(spans.all_right());
      const auto chunks = spans.computed();
      EXPECT_TRUE(chunks_follow(plan, chunks));
      EXPECT_EQ(report.chunk_count, chunks.size());
      EXPECT_EQ(report.depth, depth);
      EXPECT_EQ(spans.most_computes_at_once(), 1) << "kernels in chunk order ran at once";
      if (depth % 2 == 0) {
        EXPECT_EQ(done.size(), chunks.size());
        EXPECT_TRUE(std::is_sorted(done.begin(), done.end())) << "chunks reported out of order";
        EXPECT_TRUE(done_ready) << "a chunk was reported done before its outputs were written";
      }
    }
  }
  EXPECT_GE(backend.executor().operations_checked(), 2 * 3 * plan.items / plan.chunk_items);
  backend.expect_clean();
}

}  // namespace

class PipelineMatrix : public ::testing::TestWithParam<Mix> {};

TEST_P(PipelineMatrix, EveryItemIsWrittenRightAtEveryDepth) {
  for (std::size_t depth = 1; depth <= 8; ++depth) runs_right(GetParam(), depth);
}

INSTANTIATE_TEST_SUITE_P(Host, PipelineMatrix, ::testing::ValuesIn(span_mixes()),
                         [](const ::testing::TestParamInfo<Mix>& param) { return param.param.name; });

// No items: no chunk, no compute, and still sources and sinks begun and committed.
TEST(PipelineWithNoItems, RunsNoChunkInEveryMix) {
  for (const Mix& mix : span_mixes()) {
    SCOPED_TRACE(mix.name);
    const std::size_t depth = 3;
    HostBackend backend({.jitter_us = jitter_for(depth), .seed = depth});
    {
      MixedSpans spans(mix, backend, 0);
      Pipeline p = backend.pipeline(options_for(mix, depth, plan_for(depth)));
      spans.add_to(p);
      for (int run = 0; run < 2; ++run) {
        spans.reset();
        const RunReport report = p.run();
        EXPECT_EQ(report.chunk_count, 0u);
        EXPECT_TRUE(spans.computed().empty());
        EXPECT_TRUE(spans.all_right());
      }
    }
    backend.expect_clean();
  }
}

}  // namespace sluice::test
