// Replayed runs (Replay::graph): captured once, replayed after; captured
// again when what they copy changes; refused where they cannot hold. And the
// wall time a run reports, replayed or untimed.
#include <atomic>
#include <chrono>
#include <optional>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpu_pipeline_test.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/host_registration.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"

using sluice::Chunk;
using sluice::Pipeline;
using sluice::PipelineOptions;
using sluice::Replay;
using namespace sluice::test;

namespace {

PipelineOptions small_chunks() {
  PipelineOptions o;
  o.chunk_items = 1000;
  o.depth = 3;
  return o;
}

void poison(std::span<float> out) { std::fill(out.begin(), out.end(), std::nanf("")); }

// y = 2x + 1, replayed, with the callable's calls counted: one per chunk of each capture.
void replayed_counted_affine(Pipeline& p, sluice::SpanHandle<const float> x, sluice::SpanHandle<float> y,
                             std::atomic<int>& calls) {
  p.compute(
      [&calls, x, y](const Chunk& c) {
        ++calls;
        launch_affine(c.stream, c[x].data(), c[y].data(), c.size(), 2.0f, 1.0f);
      },
      Replay::graph);
}

}  // namespace

TEST_F(GpuPipelineTest, AReplayedRunCallsTheComputeOnceAtCaptureAndReplaysIt) {
  const std::size_t n = 10'500;  // 11 chunks, the last one short
  const auto in = pattern(n);
  sluice::PinnedBuffer<float> pin_in(n), pin_out(n);
  std::copy(in.begin(), in.end(), pin_in.begin());
  Pipeline p(small_chunks());
  const auto x = p.input(pin_in.span());
  const auto y = p.output(pin_out.span());
  std::atomic<int> calls{0};
  replayed_counted_affine(p, x, y, calls);
  for (int run = 0; run < 4; ++run) {
    poison(pin_out.span());
    const auto report = p.run();
    EXPECT_EQ(report.chunk_count, 11u);
    ASSERT_TRUE(is_affine(in, pin_out.span())) << "run " << run;
    EXPECT_EQ(calls.load(), 11) << "the callable runs at capture only, once per chunk (run " << run << ")";
  }
}

// The graph copies to the memory it was captured with: after rebind() it
// must be captured again (or updated), or the results land in the old output.
TEST_F(GpuPipelineTest, AReplayedRunFollowsARebind) {
  const std::size_t n = 8'000;
  const auto in = pattern(n);
  sluice::PinnedBuffer<float> pin_in(n), first(n), second(n);
  std::copy(in.begin(), in.end(), pin_in.begin());
  Pipeline p(small_chunks());
  const auto x = p.input(pin_in.span());
  const auto y = p.output(first.span());
  std::atomic<int> calls{0};
  replayed_counted_affine(p, x, y, calls);
  poison(first.span());
  p.run();
  ASSERT_TRUE(is_affine(in, first.span()));
  p.rebind(y, second.span());
  poison(first.span());
  poison(second.span());
  p.run();
  EXPECT_TRUE(is_affine(in, second.span())) << "the replayed run still wrote to the memory it was captured with";
  EXPECT_TRUE(std::isnan(first[0]) && std::isnan(first[n - 1])) << "the old output was written after rebind()";
  EXPECT_EQ(calls.load(), 16) << "captured twice: 8 chunks each";
}

// Streams that no chunk uses took no part in the capture: joining them
// would break it (cudaErrorStreamCaptureIsolation).
TEST_F(GpuPipelineTest, AReplayedRunWithMoreComputeStreamsThanChunks) {
  const std::size_t n = 3'000;  // 3 chunks over 8 compute streams
  const auto in = pattern(n);
  sluice::PinnedBuffer<float> pin_in(n), pin_out(n);
  std::copy(in.begin(), in.end(), pin_in.begin());
  PipelineOptions o = small_chunks();
  o.kernel_order = sluice::KernelOrder::independent;
  o.compute_streams = 8;
  Pipeline p(o);
  const auto x = p.input(pin_in.span());
  const auto y = p.output(pin_out.span());
  affine(p, x, y, Replay::graph);
  for (int run = 0; run < 2; ++run) {
    poison(pin_out.span());
    const auto report = p.run();
    EXPECT_EQ(report.chunk_count, 3u);
    ASSERT_TRUE(is_affine(in, pin_out.span())) << "run " << run;
  }
}

TEST_F(GpuPipelineTest, AReplayedRunIsOrderedWithTheCallersStream) {
  const std::size_t n = 6'000;
  sluice::PinnedBuffer<float> pin_in(n), pin_out(n);
  sluice::Stream caller;
  sluice::DeviceBuffer<float> source(n, caller.view());
  Pipeline p(small_chunks());
  const auto x = p.input(pin_in.span());
  const auto y = p.output(pin_out.span());
  affine(p, x, y, Replay::graph);
  for (int run = 0; run < 3; ++run) {
    poison(pin_out.span());
    // The caller's earlier work fills the input late: the run must wait for it.
    launch_late_affine(caller, 200, nullptr, source.data(), 0, 0, 0);
    launch_iota(caller, source.data(), n, 1.0f, static_cast<float>(run));
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(pin_in.data(), source.data(), n * sizeof(float), cudaMemcpyDeviceToHost,
                                      caller.get()));
    p.run(caller);
    caller.synchronize();
    std::vector<float> expected(n);
    for (std::size_t i = 0; i < n; ++i) expected[i] = static_cast<float>(i) + static_cast<float>(run);
    ASSERT_TRUE(is_affine(expected, pin_out.span())) << "run " << run;
  }
}

namespace {
// The message a refused replay gives, or "" when the run was not refused.
std::string refusal(Pipeline& p) {
  try {
    p.run();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

// register_memory page-locks the spans for one run: the next run's locking
// is another, and a graph captured over the last one would copy through
// mappings that are gone (the context's death, not a wrong result). Each run
// captures again, and the notes say why.
TEST_F(GpuPipelineTest, RegisterMemoryReplaysCaptureAgainEachRun) {
  const std::size_t n = 6'000;  // 6 chunks
  auto in = pattern(n);
  std::vector<float> out(n);
  PipelineOptions o = small_chunks();
  o.host_memory = sluice::HostMemoryPolicy::register_memory;
  Pipeline p(o);
  const auto x = p.input(in);
  const auto y = p.output(out);
  std::atomic<int> calls{0};
  replayed_counted_affine(p, x, y, calls);
  for (int run = 0; run < 4; ++run) {
    poison(out);
    const auto report = p.run();
    ASSERT_TRUE(is_affine(in, out)) << "run " << run;
    EXPECT_EQ(calls.load(), 6 * (run + 1)) << "each run's locking is new: captured again (run " << run << ")";
    bool said = false;
    for (const std::string& note : report.notes) said |= note.find("captured again") != std::string::npos;
    EXPECT_TRUE(said) << "run " << run;
  }
}

// The caller ends its registration and takes a new one over the same
// memory: while the memory is pageable the replay is refused; once it is
// registered again the run is captured again, not replayed over the old
// registration.
TEST_F(GpuPipelineTest, AReplayAfterTheCallersMemoryIsRegisteredAnewCapturesAgain) {
  const std::size_t n = 5'000;
  auto in = pattern(n);
  std::vector<float> out(n);
  std::optional<sluice::HostRegistration> keep_in(std::in_place, in.data(), n * sizeof(float));
  std::optional<sluice::HostRegistration> keep_out(std::in_place, out.data(), n * sizeof(float));
  Pipeline p(small_chunks());
  const auto x = p.input(in);
  const auto y = p.output(out);
  std::atomic<int> calls{0};
  replayed_counted_affine(p, x, y, calls);
  for (int round = 0; round < 3; ++round) {
    for (int run = 0; run < 2; ++run) {
      poison(out);
      p.run();
      ASSERT_TRUE(is_affine(in, out)) << "round " << round << ", run " << run;
    }
    EXPECT_EQ(calls.load(), 5 * (round + 1)) << "captured once a registration (round " << round << ")";
    keep_out.reset();
    EXPECT_NE(refusal(p).find("span 1 (output) is pageable memory"), std::string::npos) << "round " << round;
    keep_in.reset();
    keep_in.emplace(in.data(), n * sizeof(float));
    keep_out.emplace(out.data(), n * sizeof(float));
  }
}

// The same through cudaHostRegister called by the caller itself (another
// library's registration): the driver's allocation id tells the two apart.
TEST_F(GpuPipelineTest, AReplayAfterMemoryIsRegisteredAnewOutsideSluiceCapturesAgain) {
  const std::size_t n = 5'000;
  auto in = pattern(n);
  sluice::PinnedBuffer<float> out(n);
  const std::size_t bytes = n * sizeof(float);
  SLUICE_CUDA_CHECK(cudaHostRegister(in.data(), bytes, cudaHostRegisterPortable));
  Pipeline p(small_chunks());
  const auto x = p.input(in);
  const auto y = p.output(out.span());
  std::atomic<int> calls{0};
  replayed_counted_affine(p, x, y, calls);
  for (int round = 0; round < 3; ++round) {
    for (int run = 0; run < 2; ++run) {
      poison(out.span());
      p.run();
      ASSERT_TRUE(is_affine(in, out.span())) << "round " << round << ", run " << run;
    }
    EXPECT_EQ(calls.load(), 5 * (round + 1)) << "captured once a registration (round " << round << ")";
    SLUICE_CUDA_CHECK(cudaHostUnregister(in.data()));
    SLUICE_CUDA_CHECK(cudaHostRegister(in.data(), bytes, cudaHostRegisterPortable));
  }
  SLUICE_CUDA_CHECK(cudaHostUnregister(in.data()));
}

TEST_F(GpuPipelineTest, CallerRegisteredMemoryReplays) {
  const std::size_t n = 20'000;
  auto in = pattern(n);
  std::vector<float> out(n);
  const sluice::HostRegistration keep_in(in.data(), n * sizeof(float)), keep_out(out.data(), n * sizeof(float));
  Pipeline p(small_chunks());
  const auto x = p.input(in);
  const auto y = p.output(out);
  affine(p, x, y, Replay::graph);
  for (int run = 0; run < 3; ++run) {
    poison(out);
    const auto report = p.run();
    EXPECT_EQ(report.volume.staged_in_bytes + report.volume.staged_out_bytes, 0.0);
    ASSERT_TRUE(is_affine(in, out)) << "run " << run;
  }
}


TEST_F(GpuPipelineTest, ARunThatCannotBeReplayedIsRefusedBeforeAnyWork) {
  const std::size_t n = 4'000;
  const auto in = pattern(n);
  std::vector<float> out(n, std::nanf(""));
  {  // pageable memory the caller lends is staged: no replay
    Pipeline p(small_chunks());
    const auto x = p.input(in);
    const auto y = p.output(out);
    affine(p, x, y, Replay::graph);
    const std::string why = refusal(p);
    EXPECT_NE(why.find("cannot be replayed"), std::string::npos) << why;
    EXPECT_NE(why.find("span 0 (input) is pageable memory"), std::string::npos) << why;
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[n - 1]));
    affine(p, x, y);  // the same spans, with the callable called every run, run as usual
    p.run();
    EXPECT_TRUE(is_affine(in, out));
  }
  sluice::PinnedBuffer<float> pin_in(n), pin_out(n);
  {  // a chunk-done callable runs on the host for every chunk
    Pipeline p(small_chunks());
    affine(p, p.input(pin_in.span()), p.output(pin_out.span()), Replay::graph);
    p.on_chunk_done([](std::size_t, sluice::ItemRange) {});
    const std::string why = refusal(p);
    EXPECT_NE(why.find("a chunk-done callable"), std::string::npos) << why;
  }
  {  // a sink is emptied by the host on every run
    Pipeline p(small_chunks());
    const auto x = p.input(pin_in.span());
    const auto y = p.output(sluice::consume<float>(n, [](sluice::ItemRange, std::span<const float>) {}));
    affine(p, x, y, Replay::graph);
    const std::string why = refusal(p);
    EXPECT_NE(why.find("span 1 (output, consumer) is a sink"), std::string::npos) << why;
  }
}

// An untimed run marks no device origin: its wall time is the host's, from
// the run's start to the last output. It is never 0, and never more than the
// call took. A replayed run is timed the same way, from its launch, and one
// that learns its chunks (the default options' first run) by the device:
// within the call too.
TEST_F(GpuPipelineTest, UntimedAndReplayedRunsReportTheWallTimeTheyTook) {
  const std::size_t n = 5'000'000;
  const auto in = pattern(n);
  sluice::PinnedBuffer<float> pin_in(n), pin_out(n);
  std::copy(in.begin(), in.end(), pin_in.begin());
  PipelineOptions learns;  // chunk sizes left to the pipeline: the first run learns them
  for (const auto& [replay, options] : {std::pair{Replay::none, small_chunks()}, std::pair{Replay::graph, small_chunks()},
                                        std::pair{Replay::graph, learns}}) {
    Pipeline p(options);
    const auto x = p.input(pin_in.span());
    const auto y = p.output(pin_out.span());
    affine(p, x, y, replay);
    for (int run = 0; run < 2; ++run) {
      poison(pin_out.span());
      const auto begin = std::chrono::steady_clock::now();
      const auto report = p.run();
      const double call_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
      ASSERT_TRUE(is_affine(in, pin_out.span()));
      const std::string what = std::string(replay == Replay::graph ? "replayed" : "untimed") +
                               (options.chunk_items == 0 ? ", learning its chunks" : "") + ", run " + std::to_string(run);
      EXPECT_GT(report.wall_ms, 0.0) << what;
      EXPECT_LE(report.wall_ms, call_ms) << what;
    }
  }
}

TEST_F(GpuPipelineTest, AReplayedRunOfNoItemsCapturesNothing) {
  std::vector<float> in, out;
  Pipeline p;
  std::atomic<int> calls{0};
  const auto x = p.input(in);
  const auto y = p.output(out);
  p.compute([&calls, x, y](const Chunk&) { ++calls; }, Replay::graph);
  for (int run = 0; run < 2; ++run) EXPECT_EQ(p.run().chunk_count, 0u) << "run " << run;
  EXPECT_EQ(calls.load(), 0);
}

// A capture whose callable throws is abandoned: the run fails naming the
// chunk, nothing is learnt from it, and the next run captures, learns and
// replays as a first run would.
TEST_F(GpuPipelineTest, AFailedLearningCaptureLeavesTheNextRunToLearn) {
  const std::size_t n = 2'000'000;
  const auto in = pattern(n);
  sluice::PinnedBuffer<float> pin_in(n), pin_out(n);
  std::copy(in.begin(), in.end(), pin_in.begin());
  Pipeline p;
  const auto x = p.input(pin_in.span());
  const auto y = p.output(pin_out.span());
  bool fail = true;
  p.compute(
      [&fail, x, y](const Chunk& c) {
        if (fail && c.index == 1) throw std::runtime_error("chunk 1 refused");
        launch_affine(c.stream, c[x].data(), c[y].data(), c.size(), 2.0f, 1.0f);
      },
      Replay::graph);
  EXPECT_THROW(p.run(), std::runtime_error);
  fail = false;
  for (int run = 0; run < 3; ++run) {
    poison(pin_out.span());
    const auto report = p.run();
    ASSERT_TRUE(is_affine(in, pin_out.span())) << "run " << run;
    bool learnt = false;
    for (const std::string& note : report.notes) learnt |= note.find("adapt_chunks") != std::string::npos;
    EXPECT_EQ(learnt, run == 0) << "run " << run;
  }
}
