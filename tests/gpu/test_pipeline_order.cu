// The pipeline's ordering: slots reused only when free, kernels in chunk
// order by default, and runs ordered with the caller's own stream.
#include <chrono>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "pipeline_test.hpp"
#include "sluice/device_buffer.hpp"
#include "sluice/error.hpp"
#include "sluice/pinned_buffer.hpp"
#include "sluice/stream.hpp"

using sluice::Chunk;
using sluice::Pipeline;
using sluice::PipelineOptions;
using namespace sluice::test;

TEST_F(PipelineTest, ADeviceSlotIsReusedOnlyAfterItsChunkLeftTheDevice) {
  // Each kernel waits 0.5 ms before it reads its input. Pinned spans let the
  // driver enqueue every chunk at once, the H2D copies up to depth - 1
  // chunks ahead of the kernels: if the H2D of chunk c did not wait for the
  // D2H of chunk c - depth, it would overwrite a slot a kernel has not read
  // yet, and that chunk's output would be another chunk's. More chunks than
  // event sets, so those are reused under the same pressure.
  const std::size_t chunk = 4096, chunks = 80;
  sluice::PinnedBuffer<float> in(chunk * chunks), out(chunk * chunks);
  const auto values = pattern(in.size());
  std::copy(values.begin(), values.end(), in.begin());
  for (std::size_t depth : {1u, 2u, 3u, 5u})
    for (unsigned streams : {1u, 2u}) {
      std::fill(out.begin(), out.end(), std::nanf(""));
      PipelineOptions o;
      o.chunk_items = chunk;
      o.depth = depth;
      o.kernel_order = streams > 1 ? sluice::KernelOrder::independent : sluice::KernelOrder::in_chunk_order;
      o.compute_streams = streams;
      Pipeline p(o);
      const auto x = p.input(in.span());
      const auto y = p.output(out.span());
      p.compute([x, y](const Chunk& c) { launch_late_affine(c.stream, 500, c[x].data(), c[y].data(), c.size(), 2, 1); });
      p.run();
      EXPECT_TRUE(is_affine(values, out.span())) << "depth " << depth << ", " << streams << " compute streams";
    }
}

TEST_F(PipelineTest, PinnedStagingSlotsAreReusedOnlyWhenTheHostIsDoneWithThem) {
  // Pageable spans go through pinned slots. A consumer that is slow with the
  // first chunks holds the drain back: if the driver reused a stage-out slot
  // before its chunk was copied out, or a stage-in slot before its H2D was
  // done, some chunk's output would be another's.
  const std::size_t chunk = 2048, chunks = 40;
  const auto in = pattern(chunk * chunks);
  for (std::size_t depth : {2u, 4u, 6u}) {
    std::vector<float> out(in.size(), std::nanf(""));
    PipelineOptions o;
    o.chunk_items = chunk;
    o.depth = depth;
    o.host_memory = sluice::HostMemoryPolicy::stage;
    Pipeline p(o);
    const auto x = p.input(in);
    const auto y = p.output(out);
    p.compute([x, y](const Chunk& c) { launch_late_affine(c.stream, 100, c[x].data(), c[y].data(), c.size(), 2, 1); });
    p.on_chunk_done([](std::size_t index, sluice::ItemRange) {
      if (index < 8) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
    p.run();
    EXPECT_TRUE(is_affine(in, out)) << "depth " << depth;
  }
}

TEST_F(PipelineTest, KernelsRunInChunkOrderByDefault) {
  // A running sum carries state from chunk to chunk in device memory: with
  // kernels in chunk order it equals the sequential answer.
  const std::size_t n = 200'000;
  std::vector<std::int64_t> in(n), out(n, -1);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::int64_t>(i % 13) - 5;
  std::vector<std::int64_t> expected(n);
  std::partial_sum(in.begin(), in.end(), expected.begin());
  sluice::DeviceBuffer<std::int64_t> carry(1, sluice::StreamView());
  sluice::Stream stream;
  SLUICE_CUDA_CHECK(cudaMemsetAsync(carry.data(), 0, sizeof(std::int64_t), stream.get()));
  PipelineOptions o;
  o.chunk_items = 10'000;
  Pipeline p(o);
  const auto x = p.input(in);
  const auto y = p.output(out);
  std::int64_t* c_ptr = carry.data();
  p.compute([x, y, c_ptr](const Chunk& c) { launch_running_sum(c.stream, c[x].data(), c[y].data(), c.size(), c_ptr); });
  p.run(stream);
  EXPECT_EQ(out, expected);
}

TEST_F(PipelineTest, RunOnTheCallersStreamOrdersWorkBeforeAndAfter) {
  // A reduction into the caller's device memory: zeroed on the caller's
  // stream before the run, read back on it after, with no synchronisation
  // of the device: only the stream's own order keeps it right.
  const std::size_t n = 1'000'001;
  std::vector<int> values(n);
  std::iota(values.begin(), values.end(), 1);
  const unsigned long long expected = static_cast<unsigned long long>(n) * (n + 1) / 2;
  sluice::Stream stream;
  sluice::DeviceBuffer<unsigned long long> total(1, stream);
  sluice::PinnedBuffer<unsigned long long> result(1);
  PipelineOptions o;
  o.chunk_items = 65536;
  Pipeline p(o);
  const auto v = p.input(values);
  unsigned long long* sum = total.data();
  p.compute([v, sum](const Chunk& c) { launch_accumulate(c.stream, c[v].data(), c.size(), sum); });
  for (int round = 0; round < 3; ++round) {
    // A slow kernel first, so that a run that did not wait would add into memory not yet zeroed.
    int* scratch = nullptr;
    SLUICE_CUDA_CHECK(cudaMallocAsync(&scratch, sizeof(int), stream.get()));
    launch_spin_then_write(stream, 2000, scratch, 1);
    SLUICE_CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof *sum, stream.get()));
    result[0] = 0;
    if (round < 2) {
      p.run(stream);
    } else {
      auto submission = p.submit(stream);  // returns with every chunk queued
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(result.data(), sum, sizeof *sum, cudaMemcpyDeviceToHost, stream.get()));
      stream.synchronize();
      submission.wait();
      EXPECT_EQ(result[0], expected) << "submit(stream)";
      SLUICE_CUDA_CHECK(cudaFreeAsync(scratch, stream.get()));
      continue;
    }
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(result.data(), sum, sizeof *sum, cudaMemcpyDeviceToHost, stream.get()));
    stream.synchronize();
    EXPECT_EQ(result[0], expected) << "run(stream), round " << round;
    SLUICE_CUDA_CHECK(cudaFreeAsync(scratch, stream.get()));
  }
}

TEST_F(PipelineTest, SubmitReportsChunksInOrderWithOutputReady) {
  const auto in = pattern(50'000);
  std::vector<float> out(in.size(), std::nanf(""));
  PipelineOptions o;
  o.chunk_items = 3000;
  Pipeline p(o);
  std::vector<std::size_t> order;
  bool all_ready = true;
  affine(p, p.input(in), p.output(out));
  p.on_chunk_done([&](std::size_t index, sluice::ItemRange items) {
    order.push_back(index);
    for (std::size_t i = items.begin; i < items.end; ++i) all_ready &= out[i] == in[i] * 2.0f + 1.0f;
  });
  auto submission = p.submit();
  EXPECT_THROW(p.submit(), std::logic_error);  // one run per pipeline at a time
  submission.wait();
  std::vector<std::size_t> expected((in.size() + 2999) / 3000);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(order, expected);
  EXPECT_TRUE(all_ready) << "a chunk was reported done before its output was in host memory";
}

TEST_F(PipelineTest, TwoPipelinesAtOnce) {
  const auto in1 = pattern(200'000), in2 = pattern(150'001);
  std::vector<float> out1(in1.size(), std::nanf("")), out2(in2.size(), std::nanf(""));
  PipelineOptions o;
  o.chunk_items = 8192;
  Pipeline p1(o), p2(o);
  affine(p1, p1.input(in1), p1.output(out1));
  affine(p2, p2.input(in2), p2.output(out2));
  auto s1 = p1.submit();
  auto s2 = p2.submit();
  s2.wait();
  s1.wait();
  EXPECT_TRUE(is_affine(in1, out1));
  EXPECT_TRUE(is_affine(in2, out2));
}

TEST_F(PipelineTest, TheCallersCurrentDeviceIsLeftAlone) {
  int before = -1, after = -1;
  SLUICE_CUDA_CHECK(cudaGetDevice(&before));
  const auto in = pattern(1000);
  std::vector<float> out(in.size());
  PipelineOptions o;
  o.device = before;
  Pipeline p(o);
  EXPECT_EQ(p.device(), before);
  affine(p, p.input(in), p.output(out));
  p.run();
  SLUICE_CUDA_CHECK(cudaGetDevice(&after));
  EXPECT_EQ(after, before);
  PipelineOptions bad;
  bad.device = 1000;
  EXPECT_THROW(Pipeline{bad}, std::invalid_argument);
}
