// The prefetcher for any batch on a GPU (CudaRingExecutor): batches of
// pageable and page-locked pieces, of changing sizes, reach the consumer's
// stream intact even when its kernels read them late; a kept batch keeps its
// memory; stopping early leaves the device usable; a staging slot that grows
// holds up its producer only, never the consumer's take.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gpu_test.hpp"
#include "ring/batch_prefetcher.hpp"
#include "ring/cuda_ring_executor.hpp"
#include "ring/pinned_slots.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/host_fn.hpp"
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

TEST_F(BatchPrefetcherCuda, AGrowingStagingSlotLeavesTheConsumerWaitingNotForOtherStreams) {
  // Other rings gave back as many pinned slots as are kept. A staging slot that
  // grows takes a new one the cache lacks, and that take frees kept slots beyond
  // the bound: cudaFreeHost, which waits for every stream of the device. The
  // producer waits there; the consumer's next() of a batch already put must not.
  const std::vector<float> small(1000, 1.0f), large(std::size_t{3} << 20, 2.0f);  // 4 KB, then 12 MiB
  const auto pieces = [](const std::vector<float>& v) {
    return std::vector<HostPiece>{{reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(float), false}};
  };
  Stream consumer, other;
  std::atomic<bool> let_go{false};
  ring::CudaRingExecutor executor(0);
  BatchPrefetcher p(executor, {.ahead = 4, .held = 1, .threads = 2});
  // After the prefetcher took its slots: earlier tests of this process leave kept slots of its
  // size, and its take of them would bring the kept bytes back under the bound (no free, so a
  // consumer held by the lock would not show). Nor may a slot of the grown size be kept.
  std::vector<PinnedBuffer<std::byte>> of_grown_size;
  const std::size_t grown_bytes = large.size() * sizeof(float);  // whole MiB: the grown slot's size
  for (bool kept_one = true; kept_one;) {
    const std::size_t before = detail::kept_pinned_bytes();
    of_grown_size.push_back(detail::take_pinned_slot(grown_bytes));
    kept_one = detail::kept_pinned_bytes() + grown_bytes == before;
  }
  std::vector<PinnedBuffer<std::byte>> others;
  const std::size_t limit = detail::kept_pinned_limit(), size = (std::size_t{4} << 20) + 4096;
  std::size_t kept = detail::kept_pinned_bytes();
  for (; kept + size <= limit; kept += size) others.push_back(detail::take_pinned_slot(size));
  if (kept <= limit) others.push_back(detail::take_pinned_slot(limit - kept + 1));  // past the bound; never whole MiB
  for (auto& buffer : others) detail::give_back_pinned_slot(std::move(buffer));
  ASSERT_GT(detail::kept_pinned_bytes(), limit);
  p.put(pieces(small));  // staging slot 0
  p.put(pieces(small));  // staging slot 1
  // Another stream of the process is busy until the test lets it go (or 20 s pass).
  enqueue_host(other, [&let_go] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!let_go && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::thread producer([&] {
    try {
      p.put(pieces(large));  // staging slot 0 again, grown: the take frees kept slots and waits
      p.close();
    } catch (const std::logic_error&) {
    }
  });
  // The take moves what is kept beyond the bound out of the cache, then frees it: from then on the
  // producer is inside the free (or past it), never still before it. (EXPECT: the producer joins below.)
  for (int i = 0; i < 10000 && detail::kept_pinned_bytes() > limit; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_LE(detail::kept_pinned_bytes(), limit) << "the producer's grown slot freed nothing kept";
  const ring::ConsumerLane lane{consumer.view().get()};
  const auto first = p.next(lane), second = p.next(lane);
  const bool busy = cudaStreamQuery(other.get()) == cudaErrorNotReady;
  let_go = true;
  producer.join();
  const auto third = p.next(lane);
  ASSERT_TRUE(first && second && third);
  EXPECT_TRUE(busy) << "the consumer's next() waited while the producer's grown staging slot freed kept ones";
  other.synchronize();
  consumer.synchronize();
  EXPECT_EQ(to_host(reinterpret_cast<const float*>(third->data + third->offsets[0]), 4), std::vector<float>(4, 2.0f));
}

}  // namespace sluice::test
