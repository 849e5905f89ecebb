// The ring to the host on a GPU (CudaRingExecutor): what the caller's stream
// makes, enqueued and not synchronized, arrives on the host byte for byte,
// staged (drained out of staging slots) and unstaged (into the caller's
// page-locked memory), however the host waits for each copy; and device
// byte ranges written out through it (write_device_ranges).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <vector>

#include "gpu_test.hpp"
#include "io/file_writes.hpp"
#include "ring/cuda_ring_executor.hpp"
#include "ring/to_host_ring.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"

namespace sluice::test {

namespace {

constexpr std::size_t chunk = std::size_t{1} << 20;
constexpr std::size_t chunks = 24;

unsigned char chunk_value(std::size_t c) { return static_cast<unsigned char>(c * 7 + 1); }

ring::RingOptions to_host(std::size_t ahead, bool staged) {
  ring::RingOptions o;
  o.items = chunks;
  o.direction = ring::Direction::to_host;
  o.ahead = ahead;
  o.staged = staged;
  o.slot_bytes = chunk;
  return o;
}

// Device memory of `chunks` chunks, poisoned and synchronized; then each chunk's value is set
// on `stream` just before its put, not synchronized: only the mark orders the copy after it.
struct Made {
  DeviceBuffer<std::byte> device;
  explicit Made(Stream& stream) : device(chunks * chunk, stream.view()) {
    SLUICE_CUDA_CHECK(cudaMemsetAsync(device.data(), 0xEE, chunks * chunk, stream.view().get()));
    stream.synchronize();
  }
  void make(std::size_t c, Stream& stream) {
    // A large memset first, so that the copy would overtake it without its wait.
    SLUICE_CUDA_CHECK(cudaMemsetAsync(device.data() + c * chunk, 0x00, chunk, stream.view().get()));
    SLUICE_CUDA_CHECK(cudaMemsetAsync(device.data() + c * chunk, chunk_value(c), chunk, stream.view().get()));
  }
};

std::size_t wrong(const std::byte* data, std::size_t c) {
  std::size_t bad = 0;
  for (std::size_t k = 0; k < chunk; ++k) bad += data[k] != std::byte{chunk_value(c)};
  return bad;
}

}  // namespace

class ToHostRingCuda : public GpuTest {};

TEST_F(ToHostRingCuda, WhatTheCallersStreamMakesIsDrainedByteForByteHoweverTheHostWaits) {
  using ring::StagingWait;
  for (const StagingWait wait : {StagingWait::sleep, StagingWait::nap, StagingWait::poll}) {
    for (const std::size_t ahead : {1u, 3u}) {
      Stream stream;
      Made made(stream);
      std::vector<std::size_t> bad(chunks, SIZE_MAX);
      ring::CudaRingExecutor executor(0, 0, wait);
      ring::ToHostRing ring(ring::RingPlan(to_host(ahead, true)), executor);
      for (std::size_t c = 0; c < chunks; ++c) {
        made.make(c, stream);
        ring.put({chunk, {{made.device.data() + c * chunk, 0, chunk}},
                  [&bad, c](std::span<const std::byte> staged) { bad[c] = staged.size() == chunk ? wrong(staged.data(), c) : SIZE_MAX; }},
                 {stream.view().get()});
      }
      ring.finish();
      for (std::size_t c = 0; c < chunks; ++c) EXPECT_EQ(bad[c], 0u) << "chunk " << c << " ahead " << ahead;
      EXPECT_EQ(ring.drained(), chunks);
    }
  }
}

TEST_F(ToHostRingCuda, UnstagedCopiesLandInTheCallersPinnedMemory) {
  Stream stream;
  Made made(stream);
  PinnedBuffer<std::byte> host(chunks * chunk);
  std::memset(host.data(), 0xEE, chunks * chunk);
  ring::CudaRingExecutor executor(0);
  ring::ToHostRing ring(ring::RingPlan(to_host(2, false)), executor);
  std::vector<int> drained(chunks, 0);
  for (std::size_t c = 0; c < chunks; ++c) {
    made.make(c, stream);
    ring.put({0, {{made.device.data() + c * chunk, 0, chunk, host.data() + c * chunk}},
              [&drained, c](std::span<const std::byte> staged) { drained[c] = staged.empty() ? 1 : 2; }},
             {stream.view().get()});
  }
  ring.finish();
  for (std::size_t c = 0; c < chunks; ++c) {
    EXPECT_EQ(wrong(host.data() + c * chunk, c), 0u) << "chunk " << c;
    EXPECT_EQ(drained[c], 1) << "chunk " << c;
  }
}

TEST_F(ToHostRingCuda, DeviceRangesAreWrittenWhereEachBelongs) {
  Stream stream;
  Made made(stream);
  for (std::size_t c = 0; c < chunks; ++c) made.make(c, stream);
  // Ranges of odd sizes with gaps between them in the "file", cut into chunks of another size.
  std::vector<ring::DeviceRange> ranges;
  std::uint64_t at = 3;
  for (std::size_t c = 0; c < chunks; c += 3) {
    ranges.push_back({made.device.data() + c * chunk, chunk - c * 1000, at});
    at += chunk - c * 1000 + 17;
  }
  std::vector<std::byte> file(at, std::byte{0xEE});
  std::mutex file_mutex;
  const auto write = [&](std::uint64_t offset, std::span<const std::byte> bytes) {
    std::lock_guard lock(file_mutex);
    std::memcpy(file.data() + offset, bytes.data(), bytes.size());
  };
  ring::CudaRingExecutor executor(0);
  std::atomic<std::uint64_t> written{0};
  ring::write_device_ranges(ranges, executor, {stream.view().get()}, write, {.chunk_bytes = 3 * chunk / 2 + 11, .staging = 3, .threads = 4},
                            written);
  std::uint64_t total = 0;
  for (std::size_t r = 0; r < ranges.size(); ++r) {
    const std::size_t c = r * 3;
    std::size_t bad = 0;
    for (std::size_t k = 0; k < ranges[r].bytes; ++k) bad += file[ranges[r].offset + k] != std::byte{chunk_value(c)};
    EXPECT_EQ(bad, 0u) << "range " << r;
    total += ranges[r].bytes;
  }
  EXPECT_EQ(written.load(), total);
}

}  // namespace sluice::test
