// The prefetcher for any batch on a GPU (CudaRingExecutor): batches of
// pageable and page-locked pieces, of changing sizes, reach the consumer's
// stream intact even when its kernels read them late; a kept batch keeps its
// memory; stopping early leaves the device usable.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <thread>
#include <vector>

#include "gpu_test.hpp"
#include "ring/batch_prefetcher.hpp"
#include "ring/cuda_ring_executor.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "test_kernels.cuh"

namespace sluice::test {

namespace {

using ring::BatchPrefetcher;
using ring::HostPiece;

// Batch b: a pageable piece of floats b*1000 + i and a page-locked one of -(b*1000 + i).
struct Batches {
  std::vector<std::vector<float>> pageable;
  std::vector<PinnedBuffer<float>> pinned;
  explicit Batches(std::size_t count) {
    for (std::size_t b = 0; b < count; ++b) {
      const std::size_t n = 1000 + (b * 7919) % 50000;
      pageable.emplace_back(n);
      pinned.emplace_back(n / 3 + 1);
      for (std::size_t i = 0; i < n; ++i) pageable.back()[i] = static_cast<float>(b * 1000 + i);
      for (std::size_t i = 0; i < pinned.back().size(); ++i) pinned.back().data()[i] = -static_cast<float>(b * 1000 + i);
    }
  }
  std::vector<HostPiece> pieces(std::size_t b) const {
    return {{reinterpret_cast<const std::byte*>(pageable[b].data()), pageable[b].size() * sizeof(float), false},
            {reinterpret_cast<const std::byte*>(pinned[b].data()), pinned[b].size() * sizeof(float), true}};
  }
};

std::thread produce(BatchPrefetcher& p, const Batches& batches) {
  return std::thread([&] {
    try {
      for (std::size_t b = 0; b < batches.pageable.size(); ++b) p.put(batches.pieces(b));
      p.close();
    } catch (const std::logic_error&) {
    }
  });
}

std::vector<float> to_host(const float* device, std::size_t n) {
  std::vector<float> out(n);
  SLUICE_CUDA_CHECK(cudaMemcpy(out.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace

class BatchPrefetcherCuda : public GpuTest {};

TEST_F(BatchPrefetcherCuda, BatchesReachKernelsThatReadThemLateIntact) {
  const Batches batches(24);
  Stream consumer;
  std::vector<DeviceBuffer<float>> outs;
  {
    ring::CudaRingExecutor executor(0);
    BatchPrefetcher p(executor, {.ahead = 2, .held = 2, .threads = 4});
    std::thread producer = produce(p, batches);
    while (auto b = p.next(ring::ConsumerLane{consumer.view().get()})) {
      ASSERT_EQ(b->offsets.size(), 2u);
      const std::size_t n = batches.pageable[b->position].size(), m = batches.pinned[b->position].size();
      outs.emplace_back(n + m, consumer.view());
      // Reads its input after 300 us: a slot refilled before its release shows.
      launch_late_affine(consumer, 300, reinterpret_cast<const float*>(b->data + b->offsets[0]), outs.back().data(), n, 1, 0);
      launch_late_affine(consumer, 0, reinterpret_cast<const float*>(b->data + b->offsets[1]), outs.back().data() + n, m, 1, 0);
    }
    producer.join();
    consumer.synchronize();
  }
  ASSERT_EQ(outs.size(), 24u);
  for (std::size_t b = 0; b < 24; ++b) {
    const std::size_t n = batches.pageable[b].size(), m = batches.pinned[b].size();
    const auto got = to_host(outs[b].data(), n + m);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += got[i] != batches.pageable[b][i];
    for (std::size_t i = 0; i < m; ++i) wrong += got[n + i] != batches.pinned[b].data()[i];
    EXPECT_EQ(wrong, 0u) << "batch " << b;
  }
}

TEST_F(BatchPrefetcherCuda, AKeptBatchKeepsItsMemoryAfterThePrefetcherEnds) {
  const Batches batches(10);
  Stream consumer;
  std::optional<BatchPrefetcher::Batch> first;
  {
    ring::CudaRingExecutor executor(0);
    BatchPrefetcher p(executor, {.ahead = 1, .held = 1});
    std::thread producer = produce(p, batches);
    while (auto b = p.next(ring::ConsumerLane{consumer.view().get()})) {
      if (b->position == 0) {
        first = *b;
        p.keep(0);
      }
    }
    producer.join();
  }
  consumer.synchronize();
  ASSERT_TRUE(first);
  const auto got = to_host(reinterpret_cast<const float*>(first->data + first->offsets[0]), batches.pageable[0].size());
  EXPECT_EQ(got, batches.pageable[0]);
  first.reset();  // freed in the consumer stream's order
  consumer.synchronize();
}

TEST_F(BatchPrefetcherCuda, StoppingEarlyLeavesTheDeviceUsable) {
  const Batches batches(12);
  Stream consumer;
  for (std::size_t after : {0u, 3u}) {
    ring::CudaRingExecutor executor(0);
    BatchPrefetcher p(executor, {.ahead = 3, .held = 2});
    std::thread producer = produce(p, batches);
    for (std::size_t k = 0; k < after; ++k) ASSERT_TRUE(p.next(ring::ConsumerLane{consumer.view().get()}));
    p.stop();
    producer.join();
  }
  consumer.synchronize();
  SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace sluice::test
