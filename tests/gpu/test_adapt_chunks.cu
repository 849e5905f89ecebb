// Chunks that adapt to the work, where the compute's speed against the
// copies is known: a copy within device memory is far faster than the link,
// so the pipeline keeps its chunks (a kernel would do too, but not under
// compute-sanitizer, which slows kernels and not copies); and a replayed
// pipeline learns the same from a first run captured with timing marks.
// (A slow kernel ramping the chunks runs on both executors:
// tests/pipeline/test_adapt_chunks.cpp.)
#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "gpu_pipeline_test.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/pinned_buffer.hpp"

using sluice::Chunk;
using sluice::Pipeline;
using sluice::Replay;
using sluice::RunReport;
using namespace sluice::test;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// `mib` MiB of floats: the pattern, pinned in, and a pinned output; a
// pipeline's spans over the two.
struct PinnedCase {
  explicit PinnedCase(std::size_t mib) : in(pattern(mib * MiB / sizeof(float))), pin_in(in.size()), pin_out(in.size()) {
    std::copy(in.begin(), in.end(), pin_in.begin());
    x = p.input(pin_in.span());
    y = p.output(pin_out.span());
  }
  void poison() { std::fill(pin_out.begin(), pin_out.end(), std::nanf("")); }
  // `count` runs, the output poisoned before each; `came_out` says whether a run's output is right.
  template <class Check>
  std::vector<RunReport> runs(int count, Check came_out) {
    std::vector<RunReport> reports;
    for (int run = 0; run < count; ++run) {
      poison();
      reports.push_back(p.run());
      EXPECT_TRUE(came_out()) << "run " << run;
    }
    return reports;
  }

  std::vector<float> in;
  sluice::PinnedBuffer<float> pin_in, pin_out;
  Pipeline p;
  sluice::SpanHandle<const float> x;
  sluice::SpanHandle<float> y;
};

// A compute callable that counts its calls (a replayed pipeline's are its captures) and does `work`.
template <class Work>
auto counted(std::atomic<std::size_t>& calls, Work work) {
  return [&calls, work](const Chunk& c) {
    ++calls;
    work(c);
  };
}

}  // namespace

TEST_F(GpuPipelineTest, CopyBoundWorkKeepsItsChunks) {
  PinnedCase t(16);
  Pipeline& p = t.p;
  p.compute([x = t.x, y = t.y](const Chunk& c) {
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(c[y].data(), c[x].data(), c.size() * sizeof(float), cudaMemcpyDeviceToDevice,
                                      c.stream.get()));
  });
  auto is_copy = [&] { return std::equal(t.in.begin(), t.in.end(), t.pin_out.begin()); };
  t.poison();
  const RunReport first = p.run();
  ASSERT_TRUE(is_copy());
  const std::string note = adapt_note(first);
  EXPECT_NE(note.find("later runs keep these chunks"), std::string::npos) << note;
  t.poison();
  const RunReport second = p.run();
  ASSERT_TRUE(is_copy());
  EXPECT_EQ(second.chunk_count, first.chunk_count);
  EXPECT_EQ(second.chunk_items, first.chunk_items);
  EXPECT_TRUE(adapt_note(second).empty()) << adapt_note(second);
}

TEST_F(GpuPipelineTest, AReplayedPipelineLearnsFromItsFirstRun) {
  // Kernels far slower than the copies: the first run, captured with a
  // timing mark around every stage, learns it, and the next is captured
  // again in the chunks it learnt, without the marks.
  PinnedCase t(8);
  Pipeline& p = t.p;
  std::atomic<std::size_t> calls{0};
  p.compute(counted(calls,
                    [x = t.x, y = t.y](const Chunk& c) {
                      launch_late_affine(c.stream, 500, c[x].data(), c[y].data(), c.size(), 2.0f, 1.0f);
                    }),
            Replay::graph);
  const std::vector<RunReport> reports = t.runs(3, [&] { return is_affine(t.in, t.pin_out.span()); });
  const std::string note = adapt_note(reports[0]);
  EXPECT_NE(note.find("the kernels decide"), std::string::npos) << note;
  EXPECT_GT(reports[0].volume.kernel_ms, 0.5) << "the graph's timing marks did not see a 500 us kernel";
  EXPECT_EQ(reports[1].volume.kernel_ms, 0.0) << "a replay that learns nothing is timed as a whole";
  EXPECT_GT(reports[1].chunk_count, reports[0].chunk_count) << "a replay ramps from smaller chunks";
  EXPECT_EQ(reports[2].chunk_count, reports[1].chunk_count);
  EXPECT_TRUE(adapt_note(reports[1]).empty()) << adapt_note(reports[1]);
  EXPECT_EQ(calls.load(), reports[0].chunk_count + reports[1].chunk_count)
      << "the callable runs at each capture: the learning one and the one in the learnt chunks, not at replays";
}

TEST_F(GpuPipelineTest, AReplayedCopyBoundPipelineKeepsItsChunks) {
  PinnedCase t(16);
  Pipeline& p = t.p;
  std::atomic<std::size_t> calls{0};
  p.compute(counted(calls,
                    [x = t.x, y = t.y](const Chunk& c) {
                      SLUICE_CUDA_CHECK(cudaMemcpyAsync(c[y].data(), c[x].data(), c.size() * sizeof(float),
                                                        cudaMemcpyDeviceToDevice, c.stream.get()));
                    }),
            Replay::graph);
  const std::vector<RunReport> reports =
      t.runs(3, [&] { return std::equal(t.in.begin(), t.in.end(), t.pin_out.begin()); });
  const std::string note = adapt_note(reports[0]);
  EXPECT_NE(note.find("later runs keep these chunks"), std::string::npos) << note;
  EXPECT_EQ(reports[1].chunk_count, reports[0].chunk_count);
  EXPECT_EQ(reports[2].chunk_count, reports[0].chunk_count);
  EXPECT_EQ(calls.load(), 2 * reports[0].chunk_count) << "captured to learn, then once more without the marks";
}
