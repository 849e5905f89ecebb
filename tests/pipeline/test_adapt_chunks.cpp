// Chunks that adapt to the work (PipelineOptions::adapt_chunks): the first
// run times its stages; where the kernels took longer than the copies, later
// runs ramp up from 512 KiB chunks (or, where the kernels may overlap and the
// data is small, are all 512 KiB). What was learnt is kept across rebind()
// and forgotten with the callable; a run that fails learns nothing.
// (Copy-bound work keeping its chunks, and replayed pipelines learning from
// a timed capture, are GPU-only: tests/gpu/test_adapt_chunks.cu.)
#include <algorithm>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline_test.hpp"

using sluice::Chunk;
using sluice::Pipeline;
using sluice::PipelineOptions;
using sluice::RunReport;

namespace sluice::test {

namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;

// `count` runs of `p`, the output poisoned before each and checked after it
// to be 2x + 1 of `values`.
std::vector<RunReport> checked_runs(Pipeline& p, int count, std::span<float> out, const std::vector<float>& values) {
  std::vector<RunReport> reports;
  for (int run = 0; run < count; ++run) {
    std::fill(out.begin(), out.end(), std::nanf(""));
    reports.push_back(p.run());
    EXPECT_TRUE(is_affine(values, out)) << "run " << run;
  }
  return reports;
}
}  // namespace

TEST_P(PipelineTest, KernelsSlowerThanTheCopiesRampTheChunksOfLaterRuns) {
  // 8 MiB of floats: the usual plan is six equal chunks. Each chunk's compute
  // takes 3 ms, far longer than copying it on either backend.
  const std::size_t n = 8 * MiB / sizeof(float);
  auto in = backend().pinned<float>(n), out = backend().pinned<float>(n);
  const auto values = pattern(n);
  std::copy(values.begin(), values.end(), in.begin());
  Pipeline p = pipeline();
  const auto x = p.input(in.span());
  const auto y = p.output(out.span());
  auto slow = [x, y, b = &backend()](const Chunk& c) { b->late_affine(c, 3000, c[x].data(), c[y].data(), 2, 1); };
  p.compute(slow);

  const std::vector<RunReport> reports = checked_runs(p, 3, out.span(), values);
  const std::string learnt = adapt_note(reports[0]);
  ASSERT_FALSE(learnt.empty()) << "the first run said nothing of its chunks";
  EXPECT_NE(learnt.find("512 KiB"), std::string::npos) << learnt;
  EXPECT_GT(reports[0].volume.kernel_ms, 0.0) << "the learning run's stages were not timed";
  // Later runs: the ramp (a first chunk of 512 KiB) in more chunks, and no more learning.
  for (int run : {1, 2}) {
    EXPECT_GT(reports[run].chunk_count, reports[0].chunk_count) << "run " << run;
    EXPECT_EQ(reports[run].chunk_count, reports[1].chunk_count);
    EXPECT_TRUE(adapt_note(reports[run]).empty()) << adapt_note(reports[run]);
    EXPECT_EQ(reports[run].volume.kernel_ms, 0.0) << "run " << run << " was timed: only the first learns";
  }

  // A new callable is new work: the pipeline forgets, and learns again.
  p.compute(slow);
  std::fill(out.begin(), out.end(), std::nanf(""));
  const RunReport again = p.run();
  EXPECT_TRUE(is_affine(values, out.span()));
  EXPECT_EQ(again.chunk_count, reports[0].chunk_count);
  EXPECT_FALSE(adapt_note(again).empty());
}

TEST_P(PipelineTest, KernelsThatMayOverlapAndDominateCutLaterRunsInto512KiBChunks) {
  // 8 MiB of floats over two compute streams: six equal chunks at first;
  // their kernels dominate, so later runs cut sixteen of 512 KiB, no ramp.
  const std::size_t n = 8 * MiB / sizeof(float);
  auto in = backend().pinned<float>(n), out = backend().pinned<float>(n);
  const auto values = pattern(n);
  std::copy(values.begin(), values.end(), in.begin());
  PipelineOptions options;
  options.kernel_order = sluice::KernelOrder::independent;
  Pipeline p = pipeline(options);
  const auto x = p.input(in.span());
  const auto y = p.output(out.span());
  p.compute([x, y, b = &backend()](const Chunk& c) { b->late_affine(c, 10000, c[x].data(), c[y].data(), 2, 1); });
  const std::vector<RunReport> reports = checked_runs(p, 2, out.span(), values);
  const std::string learnt = adapt_note(reports[0]);
  EXPECT_NE(learnt.find("16 chunks of 512 KiB"), std::string::npos) << learnt;
  EXPECT_EQ(reports[1].chunk_count, 16u);
  EXPECT_EQ(reports[1].chunk_items * sizeof(float), 512u << 10);
}

TEST_P(PipelineTest, WhatARunLearntIsKeptByRebindForgottenWithTheSpansAndNotLearntFromAFailure) {
  const std::size_t n = 8 * MiB / sizeof(float);
  auto in = backend().pinned<float>(n), out = backend().pinned<float>(n), other = backend().pinned<float>(n);
  const auto values = pattern(n);
  std::copy(values.begin(), values.end(), in.begin());
  Pipeline p = pipeline();
  auto x = p.input(in.span());
  auto y = p.output(out.span());
  bool fail = true;
  auto slow = [&x, &y, &fail, b = &backend()](const Chunk& c) {
    if (fail && c.index == 2) throw std::runtime_error("chunk 2 refused");
    b->late_affine(c, 3000, c[x].data(), c[y].data(), 2, 1);
  };
  p.compute(slow);
  auto run = [&](std::span<float> to, const char* what) {
    std::fill(to.begin(), to.end(), std::nanf(""));
    const RunReport report = p.submit().wait();  // the learning works through submit() as through run()
    EXPECT_TRUE(is_affine(values, to)) << what;
    return report;
  };

  EXPECT_THROW(p.run(), std::runtime_error);
  fail = false;
  const RunReport learnt = run(out.span(), "after a failed run");
  EXPECT_FALSE(adapt_note(learnt).empty()) << "the failed run learnt something";

  p.rebind(y, other.span());
  const RunReport rebound = run(other.span(), "after rebind()");
  EXPECT_TRUE(adapt_note(rebound).empty()) << adapt_note(rebound);
  EXPECT_GT(rebound.chunk_count, learnt.chunk_count) << "rebind() forgot what was learnt";

  p.clear_spans();
  x = p.input(in.span());
  y = p.output(out.span());
  p.compute(slow);
  const RunReport fresh = run(out.span(), "after clear_spans()");
  EXPECT_FALSE(adapt_note(fresh).empty()) << "clear_spans() kept what was learnt of the old callable";
  EXPECT_EQ(fresh.chunk_count, learnt.chunk_count);
}

TEST_P(PipelineTest, ChunksSetByTheCallerOrAdaptingTurnedOffNeverChange) {
  const std::size_t n = 8 * MiB / sizeof(float);
  auto in = backend().pinned<float>(n), out = backend().pinned<float>(n);
  const auto values = pattern(n);
  std::copy(values.begin(), values.end(), in.begin());
  PipelineOptions set_size, turned_off;
  set_size.chunk_items = n / 4;
  turned_off.adapt_chunks = false;
  for (const PipelineOptions& o : {set_size, turned_off}) {
    Pipeline p = pipeline(o);
    const auto x = p.input(in.span());
    const auto y = p.output(out.span());
    p.compute([x, y, b = &backend()](const Chunk& c) { b->late_affine(c, 3000, c[x].data(), c[y].data(), 2, 1); });
    std::fill(out.begin(), out.end(), std::nanf(""));
    const RunReport first = p.run();
    EXPECT_TRUE(is_affine(values, out.span()));
    std::fill(out.begin(), out.end(), std::nanf(""));
    const RunReport second = p.run();
    EXPECT_TRUE(is_affine(values, out.span()));
    EXPECT_EQ(second.chunk_count, first.chunk_count) << "chunk_items " << o.chunk_items;
    EXPECT_TRUE(adapt_note(first).empty()) << adapt_note(first);
    EXPECT_EQ(first.volume.kernel_ms, 0.0) << "a run that learns nothing times nothing";
  }
}

}  // namespace sluice::test
