// sluice::StreamedWeights on a GPU: layers of different sizes in page-locked
// memory reach the compute stream bitwise, in their order forward and
// backward, pass after pass, read by the stream with no host wait between
// layers; the device's memory pool grows by no more than the slots, which the
// budget bounds; pageable or device memory is refused before any work; and a
// slow layer keeps its slot until its kernels are done, however far ahead
// the copies run. Each case runs under a watchdog, so a hang fails it
// instead of the suite.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "../host/run_probes.hpp"
#include "core/splitmix64.hpp"
#include "gpu_test.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/weights/streamed_weights.hpp"
#include "test_kernels.cuh"

namespace sluice::test {

namespace {

constexpr auto limit = std::chrono::seconds(120);

// Layer k's piece i, in page-locked memory; byte j a hash of (k, i, j), so
// that a byte of another layer, piece or offset shows.
struct PinnedLayers {
  std::vector<std::vector<PinnedBuffer<std::byte>>> pieces;
  explicit PinnedLayers(const std::vector<std::vector<std::size_t>>& sizes) {
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      pieces.emplace_back();
      for (std::size_t i = 0; i < sizes[k].size(); ++i) {
        pieces[k].emplace_back(sizes[k][i]);
        for (std::size_t j = 0; j < sizes[k][i]; ++j) pieces[k][i].data()[j] = byte(k, i, j);
      }
    }
  }
  static std::byte byte(std::size_t k, std::size_t i, std::size_t j) {
    return static_cast<std::byte>(detail::splitmix64((k << 40) ^ (i << 39) ^ j));
  }
  std::vector<std::vector<BatchPiece>> batch_pieces() {
    std::vector<std::vector<BatchPiece>> out;
    for (auto& layer : pieces) {
      out.emplace_back();
      for (auto& piece : layer) out.back().push_back({piece.data(), piece.size(), true});
    }
    return out;
  }
  // Whether a block copied back holds layer k's pieces at its offsets.
  bool matches(std::size_t k, const std::byte* block, std::size_t bytes, const std::vector<std::size_t>& offsets) const {
    if (k >= pieces.size() || offsets.size() != pieces[k].size()) return false;
    for (std::size_t i = 0; i < offsets.size(); ++i) {
      const std::size_t n = pieces[k][i].size();
      if (offsets[i] + n > bytes || std::memcmp(block + offsets[i], pieces[k][i].data(), n) != 0) return false;
    }
    return true;
  }
};

// A layer as the compute stream saw it: each piece copied back on that
// stream after the "kernels", into page-locked memory, and checked at the end.
// The padding between pieces is never written, so it is not read (initcheck
// would say so) but left zero.
struct Seen {
  StreamedWeights::Layer layer;
  PinnedBuffer<std::byte> block;
};
Seen copy_back(const StreamedWeights::Layer& layer, const PinnedLayers& layers, const Stream& compute) {
  Seen seen{layer, PinnedBuffer<std::byte>(layer.bytes)};
  std::memset(seen.block.data(), 0, layer.bytes);
  const auto& pieces = layers.pieces.at(layer.index);
  for (std::size_t i = 0; i < layer.offsets.size() && i < pieces.size(); ++i)
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(seen.block.data() + layer.offsets[i], layer.data + layer.offsets[i],
                                      std::min(pieces[i].size(), layer.bytes - std::min(layer.offsets[i], layer.bytes)),
                                      cudaMemcpyDeviceToHost, compute.get()));
  return seen;
}

// The device's default memory pool, where the slots are allocated.
struct Pool {
  cudaMemPool_t pool = nullptr;
  explicit Pool(int device) { SLUICE_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device)); }
  std::uint64_t get(cudaMemPoolAttr attr) const {
    std::uint64_t v = 0;
    SLUICE_CUDA_CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
    return v;
  }
  void reset_high() const {
    std::uint64_t zero = 0;  // sets the high to the current
    SLUICE_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  }
};

}  // namespace

class StreamedWeightsGpu : public GpuTest {};

TEST_F(StreamedWeightsGpu, EveryLayerReachesTheComputeStreamInOrderForwardAndBackward) {
  // Six layers of different sizes, two pieces each (a weight and a bias).
  std::vector<std::vector<std::size_t>> sizes;
  for (std::size_t k = 0; k < 6; ++k) sizes.push_back({(std::size_t{64} << 10) * (1 + (k * 5) % 7) + 13 * k, 1000 + k});
  PinnedLayers layers(sizes);
  Stream compute;
  std::vector<Seen> seen;
  within(limit, "three passes of six layers, forward and backward", [&] {
    StreamedWeights weights(layers.batch_pieces(), {.ahead = 2, .backward = true});
    EXPECT_EQ(weights.ahead(), 2u);
    for (std::size_t p = 0; p < 36; ++p) seen.push_back(copy_back(weights.next(compute), layers, compute));  // no host wait between
    compute.synchronize();
  });
  const std::vector<std::size_t> pass{0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0};
  ASSERT_EQ(seen.size(), 36u);
  for (std::size_t p = 0; p < 36; ++p) {
    const StreamedWeights::Layer& l = seen[p].layer;
    EXPECT_EQ(l.index, pass[p % 12]) << "position " << p;
    EXPECT_EQ(l.pass, p / 12) << "position " << p;
    EXPECT_EQ(l.backward, p % 12 >= 6) << "position " << p;
    EXPECT_TRUE(layers.matches(l.index, seen[p].block.data(), l.bytes, l.offsets)) << "position " << p << ", layer " << l.index;
  }
}

TEST_F(StreamedWeightsGpu, TheDevicePoolGrowsByNoMoreThanTheSlotsTheBudgetHolds) {
  // Blocks of 16 to 22 MiB: a slot more than the budget holds would show
  // above the allowance for the slots' first, 1-byte allocations.
  const std::size_t mib = std::size_t{1} << 20;
  PinnedLayers layers({{16 * mib}, {22 * mib - 256, 100}, {18 * mib}, {20 * mib}});
  const std::size_t block = 22 * mib - 256 + 100;  // the largest layer's: its bias at 22 MiB - 256
  const std::size_t budget = 3 * block + block / 2;  // three slots and a half: ahead 2
  Stream compute;
  const Pool pool(0);
  SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
  pool.reset_high();
  const std::uint64_t before = pool.get(cudaMemPoolAttrUsedMemCurrent);
  std::vector<Seen> seen;
  std::size_t device_bytes = 0;
  within(limit, "two passes within a budget", [&] {
    StreamedWeights weights(layers.batch_pieces(), {.device_budget = budget});
    EXPECT_EQ(weights.ahead(), 2u);
    device_bytes = weights.device_bytes();
    for (std::size_t p = 0; p < 8; ++p) seen.push_back(copy_back(weights.next(compute), layers, compute));
    compute.synchronize();
  });
  EXPECT_EQ(device_bytes, 3 * block);
  EXPECT_LE(device_bytes, budget);
  const std::uint64_t high = pool.get(cudaMemPoolAttrUsedMemHigh);
  EXPECT_LE(high - before, device_bytes + 3 * 2 * mib) << "the pool's use rose by " << high - before;
  for (std::size_t p = 0; p < seen.size(); ++p)
    EXPECT_TRUE(layers.matches(seen[p].layer.index, seen[p].block.data(), seen[p].layer.bytes, seen[p].layer.offsets))
        << "position " << p;
}

TEST_F(StreamedWeightsGpu, PageableOrDeviceMemoryIsRefusedBeforeAnyWork) {
  PinnedLayers layers({{4096}, {4096}});
  std::vector<std::byte> pageable(4096);
  Stream stream;
  DeviceBuffer<std::byte> device(4096, stream);
  stream.synchronize();
  const Pool pool(0);
  const std::uint64_t before = pool.get(cudaMemPoolAttrUsedMemCurrent);
  auto refusal = [&](BatchPiece bad) -> std::string {
    auto pieces = layers.batch_pieces();
    pieces[1].push_back(bad);
    try {
      StreamedWeights weights(std::move(pieces));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  const std::string marked = refusal({pageable.data(), pageable.size(), false});
  EXPECT_NE(marked.find("piece 1 of layer 1 is not marked page_locked"), std::string::npos) << marked;
  const std::string pageable_said = refusal({pageable.data(), pageable.size(), true});
  EXPECT_NE(pageable_said.find("piece 1 of layer 1"), std::string::npos) << pageable_said;
  EXPECT_NE(pageable_said.find("pageable"), std::string::npos) << pageable_said;
  const std::string device_said = refusal({device.data(), device.size(), true});
  EXPECT_NE(device_said.find("device"), std::string::npos) << device_said;
  const std::string budget_said = [&]() -> std::string {
    try {
      StreamedWeights weights(layers.batch_pieces(), {.device_budget = 8191});
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  }();
  EXPECT_NE(budget_said.find("give at least 8192 bytes"), std::string::npos) << budget_said;
  EXPECT_EQ(pool.get(cudaMemPoolAttrUsedMemCurrent), before);  // no slot was allocated
}

TEST_F(StreamedWeightsGpu, ASlowLayerKeepsItsSlotUntilItsKernelsAreDone) {
  // ahead 1: two slots, so layer k + 2's copy goes into layer k's slot. Each
  // layer's "kernel" spins 2 ms before it reads the layer: a copy that did
  // not wait for it on the GPU would overwrite the slot before the read.
  PinnedLayers layers({{std::size_t{1} << 20}, {std::size_t{1} << 20}, {std::size_t{1} << 20}, {std::size_t{1} << 20}});
  Stream compute;
  DeviceBuffer<int> flag(1, compute);
  std::vector<Seen> seen;
  within(limit, "slow layers", [&] {
    StreamedWeights weights(layers.batch_pieces(), {.ahead = 1});
    for (std::size_t p = 0; p < 12; ++p) {
      const StreamedWeights::Layer layer = weights.next(compute);
      launch_spin_then_write(compute, 2000, flag.data(), static_cast<int>(p));
      seen.push_back(copy_back(layer, layers, compute));
    }
    compute.synchronize();
  });
  ASSERT_EQ(seen.size(), 12u);
  for (std::size_t p = 0; p < seen.size(); ++p) {
    EXPECT_EQ(seen[p].layer.index, p % 4) << "position " << p;
    EXPECT_TRUE(layers.matches(seen[p].layer.index, seen[p].block.data(), seen[p].layer.bytes, seen[p].layer.offsets))
        << "position " << p;
  }
}

TEST_F(StreamedWeightsGpu, TheReadmeLoopRuns) {
  // What the README's loop needs: three layers of a weight and a bias in
  // page-locked memory, and a `linear` that stands for the caller's kernel:
  // it copies the weight back, on the stream, to be checked at the end.
  struct Linear {
    std::span<const float> w, b;
  };
  const std::size_t n = 3000;
  PinnedBuffer<float> host(3 * (n + 10));
  for (std::size_t i = 0; i < host.size(); ++i) host.data()[i] = static_cast<float>(i) * 0.5f;
  std::vector<Linear> model;
  for (std::size_t k = 0; k < 3; ++k) model.push_back({{host.data() + k * (n + 10), n}, {host.data() + k * (n + 10) + n, 10}});
  const int steps = 2;
  Stream stream;
  float* x = nullptr;
  float* y = nullptr;
  std::vector<PinnedBuffer<float>> seen;
  auto linear = [&](const float* w, const float* b, float*, float*, StreamView on) {
    (void)b;
    seen.emplace_back(n);
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(seen.back().data(), w, n * sizeof(float), cudaMemcpyDeviceToHost, on.get()));
  };
  within(limit, "the README's loop", [&] {
    // As in the README:
    std::vector<std::vector<sluice::BatchPiece>> pieces;   // layer k's tensors, in cudaMallocHost'd memory
    for (const auto& l : model)                            // std::span<const float> l.w, l.b
      pieces.push_back({{l.w.data(), l.w.size_bytes(), true}, {l.b.data(), l.b.size_bytes(), true}});
    sluice::StreamedWeights weights(std::move(pieces), {.device_budget = std::size_t{4} << 30});
    for (int step = 0; step < steps; ++step)
      for (std::size_t k = 0; k < model.size(); ++k) {
        const auto layer = weights.next(stream);           // layer k, ready on stream
        linear(reinterpret_cast<const float*>(layer.data + layer.offsets[0]),   // your kernel, on stream
               reinterpret_cast<const float*>(layer.data + layer.offsets[1]), x, y, stream);
      }
    stream.synchronize();
  });
  ASSERT_EQ(seen.size(), 6u);
  for (std::size_t p = 0; p < seen.size(); ++p)
    EXPECT_EQ(std::memcmp(seen[p].data(), model[p % 3].w.data(), n * sizeof(float)), 0) << "layer " << p % 3 << ", step " << p / 3;
}

TEST_F(StreamedWeightsGpu, NextAfterStopIsRefused) {
  PinnedLayers layers({{4096}, {8192}});
  Stream compute;
  within(limit, "a stopped StreamedWeights", [&] {
    StreamedWeights weights(layers.batch_pieces());
    (void)weights.next(compute);
    weights.stop();
    EXPECT_THROW((void)weights.next(compute), std::logic_error);
    compute.synchronize();
  });
}

}  // namespace sluice::test
