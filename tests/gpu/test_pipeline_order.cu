// Ordering only a GPU has: runs ordered with the caller's own CUDA stream,
// and the caller's current device left alone. (The pipeline's own ordering
// runs on either executor: tests/pipeline/test_pipeline_order.cpp.)
#include <numeric>
#include <vector>

#include "gpu_pipeline_test.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"

using sluice::Chunk;
using sluice::Pipeline;
using sluice::PipelineOptions;
using namespace sluice::test;

TEST_F(GpuPipelineTest, RunOnTheCallersStreamOrdersWorkBeforeAndAfter) {
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

TEST_F(GpuPipelineTest, TheCallersCurrentDeviceIsLeftAlone) {
  // Only a pipeline on another device than the current one can show that the
  // pipeline switched devices and switched back.
  int count = 0;
  SLUICE_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count < 2) GTEST_SKIP() << "needs two GPUs: a pipeline on device 1 while device 0 is current";
  SLUICE_CUDA_CHECK(cudaSetDevice(0));
  const auto in = pattern(1000);
  std::vector<float> out(in.size());
  PipelineOptions o;
  o.device = 1;
  Pipeline p(o);
  EXPECT_EQ(p.device(), 1);
  int current = -1;
  SLUICE_CUDA_CHECK(cudaGetDevice(&current));
  EXPECT_EQ(current, 0) << "constructing the pipeline changed the current device";
  affine(p, p.input(in), p.output(out));
  p.run();
  SLUICE_CUDA_CHECK(cudaGetDevice(&current));
  EXPECT_EQ(current, 0) << "running the pipeline changed the current device";
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], in[i] * 2.0f + 1.0f) << "item " << i;
}

TEST_F(GpuPipelineTest, ADeviceThatDoesNotExistIsRefused) {
  PipelineOptions bad;
  bad.device = 1000;
  EXPECT_THROW(Pipeline{bad}, std::invalid_argument);
}
