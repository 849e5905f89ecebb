// The pipeline's ordering: slots reused only when free, kernels in chunk
// order by default, chunks reported in order, pipelines side by side.
// (Runs ordered with the caller's CUDA stream, and the caller's current
// device, are GPU-only: tests/gpu/test_pipeline_order.cu.)
#include <chrono>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "pipeline_test.hpp"

using sluice::Chunk;
using sluice::Pipeline;
using sluice::PipelineOptions;

namespace sluice::test {

TEST_P(PipelineTest, ADeviceSlotIsReusedOnlyAfterItsChunkLeftTheDevice) {
  // Each compute waits 0.5 ms before it reads its input. Pinned spans let the
  // driver enqueue every chunk at once, the H2D copies up to depth - 1
  // chunks ahead of the kernels: if the H2D of chunk c did not wait for the
  // D2H of chunk c - depth, it would overwrite a slot a kernel has not read
  // yet, and that chunk's output would be another chunk's. More chunks than
  // event sets, so those are reused under the same pressure.
  const std::size_t chunk = 4096, chunks = 80;
  auto in = backend().pinned<float>(chunk * chunks), out = backend().pinned<float>(chunk * chunks);
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
      Pipeline p = pipeline(o);
      const auto x = p.input(in.span());
      const auto y = p.output(out.span());
      p.compute([x, y, b = &backend()](const Chunk& c) { b->late_affine(c, 500, c[x].data(), c[y].data(), 2, 1); });
      p.run();
      EXPECT_TRUE(is_affine(values, out.span())) << "depth " << depth << ", " << streams << " compute streams";
    }
}

TEST_P(PipelineTest, PinnedStagingSlotsAreReusedOnlyWhenTheHostIsDoneWithThem) {
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
    Pipeline p = pipeline(o);
    const auto x = p.input(in);
    const auto y = p.output(out);
    p.compute([x, y, b = &backend()](const Chunk& c) { b->late_affine(c, 100, c[x].data(), c[y].data(), 2, 1); });
    p.on_chunk_done([](std::size_t index, sluice::ItemRange) {
      if (index < 8) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
    p.run();
    EXPECT_TRUE(is_affine(in, out)) << "depth " << depth;
  }
}

TEST_P(PipelineTest, KernelsRunInChunkOrderByDefault) {
  // A running sum carries state from chunk to chunk in device memory: with
  // kernels in chunk order it equals the sequential answer.
  const std::size_t n = 200'000;
  std::vector<std::int64_t> in(n), out(n, -1);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::int64_t>(i % 13) - 5;
  std::vector<std::int64_t> expected(n);
  std::partial_sum(in.begin(), in.end(), expected.begin());
  const auto carry = backend().device_zeroed(sizeof(std::int64_t));
  PipelineOptions o;
  o.chunk_items = 10'000;
  Pipeline p = pipeline(o);
  const auto x = p.input(in);
  const auto y = p.output(out);
  auto* carried = static_cast<std::int64_t*>(carry->data());
  p.compute([x, y, carried, b = &backend()](const Chunk& c) { b->running_sum(c, c[x].data(), c[y].data(), carried); });
  p.run();
  EXPECT_EQ(out, expected);
  std::int64_t total = 0;
  carry->read(&total, sizeof total);
  EXPECT_EQ(total, expected.back());
}

TEST_P(PipelineTest, SubmitReportsChunksInOrderWithOutputReady) {
  const auto in = pattern(50'000);
  std::vector<float> out(in.size(), std::nanf(""));
  PipelineOptions o;
  o.chunk_items = 3000;
  Pipeline p = pipeline(o);
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

TEST_P(PipelineTest, TwoPipelinesAtOnce) {
  const auto in1 = pattern(200'000), in2 = pattern(150'001);
  std::vector<float> out1(in1.size(), std::nanf("")), out2(in2.size(), std::nanf(""));
  PipelineOptions o;
  o.chunk_items = 8192;
  Pipeline p1 = pipeline(o), p2 = pipeline(o);
  affine(p1, p1.input(in1), p1.output(out1));
  affine(p2, p2.input(in2), p2.output(out2));
  auto s1 = p1.submit();
  auto s2 = p2.submit();
  s2.wait();
  s1.wait();
  EXPECT_TRUE(is_affine(in1, out1));
  EXPECT_TRUE(is_affine(in2, out2));
}

}  // namespace sluice::test
