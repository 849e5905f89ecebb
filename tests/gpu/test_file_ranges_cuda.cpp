// A file's ranges read into device memory on a GPU (CudaRingExecutor): the
// bytes on the device equal the file's, many small ranges and one large,
// through the page cache and with O_DIRECT, and a read refused before any
// copy leaves the device usable.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <fstream>
#include <utility>
#include <vector>

#include "gpu_test.hpp"
#include "io/file_ranges.hpp"
#include "ring/cuda_ring_executor.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/io_error.hpp"
#include "sluice/core/stream.hpp"

namespace sluice::test {

namespace {

std::byte file_byte(std::uint64_t at) { return static_cast<std::byte>((at * 131 + (at >> 12) * 7 + 3) & 0xff); }

struct TempFile {
  std::filesystem::path path;
  explicit TempFile(std::size_t bytes)
      : path(std::filesystem::temp_directory_path() / ("sluice-file-ranges-" + std::to_string(::getpid()) + ".bin")) {
    std::vector<char> data(bytes);
    for (std::size_t k = 0; k < bytes; ++k) data[k] = static_cast<char>(file_byte(k));
    std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(bytes));
  }
  ~TempFile() { std::filesystem::remove(path); }
};

std::shared_ptr<ring::RingExecutor> on_device_0(std::size_t) { return std::make_shared<ring::CudaRingExecutor>(0); }

// Lanes on device 0 that wait for their staging slots' copies as `wait` says.
ring::MakeExecutor on_device_0_waiting(ring::StagingWait wait) {
  return [wait](std::size_t) { return std::make_shared<ring::CudaRingExecutor>(0, 0, wait); };
}

}  // namespace

class FileRangesCuda : public GpuTest {};

TEST_F(FileRangesCuda, EveryRangeLandsOnTheDeviceAsTheFileHasItHoweverTheLanesWait) {
  const std::size_t file_bytes = (std::size_t{40} << 20) + 12345;
  const TempFile file(file_bytes);
  Stream stream;
  using ring::StagingWait;
  for (const auto& [direct, wait] : {std::pair{false, StagingWait::sleep}, std::pair{false, StagingWait::nap},
                                     std::pair{false, StagingWait::poll}, std::pair{true, ring::file_read_staging_wait}}) {
    // One large range from an unaligned offset, then 200 small ones end to end after it.
    const std::size_t large = (std::size_t{30} << 20) + 777;
    DeviceBuffer<std::byte> device(file_bytes, stream.view());
    SLUICE_CUDA_CHECK(cudaMemsetAsync(device.data(), 0xA5, file_bytes, stream.view().get()));
    // The reader's lanes copy on streams of their own, so the caller's memory must have no work
    // pending (file_ranges.hpp): without this wait the poison can land after the reads (seen under
    // compute-sanitizer's memcheck and synccheck run side by side: 2.9 MB wrong).
    stream.synchronize();
    std::vector<ring::FileRange> ranges{{4097, large, device.data() + 4097}};
    std::uint64_t at = 4097 + large;
    for (std::size_t r = 0; r < 200 && at < file_bytes; ++r) {
      const std::size_t bytes = std::min<std::size_t>(1 + (r * 7919) % 20000, file_bytes - at);
      ranges.push_back({at, bytes, device.data() + at});
      at += bytes;
    }
    // Two slots a lane: the lanes refill each slot after waiting for its copy, again and again.
    const auto report = ring::read_file_ranges(file.path, ranges, on_device_0_waiting(wait),
                                               {.chunk_bytes = std::size_t{1} << 20, .staging = 2, .direct = direct});
    EXPECT_EQ(report.bytes, at - 4097);
    std::vector<std::byte> back(file_bytes);
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(back.data(), device.data(), file_bytes, cudaMemcpyDeviceToHost, stream.view().get()));
    stream.synchronize();
    std::size_t wrong = 0;
    for (std::uint64_t k = 4097; k < at; ++k) wrong += back[k] != file_byte(k);
    EXPECT_EQ(wrong, 0u) << (direct ? "O_DIRECT" : "page cache") << ", staging wait " << static_cast<int>(wait);
    EXPECT_EQ(back[4096], std::byte{0xA5}) << "a byte before the first range was written";
  }
}

TEST_F(FileRangesCuda, ARangePastTheEndIsRefusedAndTheDeviceStaysUsable) {
  const TempFile file(100000);
  Stream stream;
  DeviceBuffer<std::byte> device(200000, stream.view());
  const ring::FileRange range{0, 200000, device.data()};
  EXPECT_THROW(ring::read_file_ranges(file.path, {&range, 1}, on_device_0, {}), IoError);
  const ring::FileRange fits{0, 100000, device.data()};
  EXPECT_EQ(ring::read_file_ranges(file.path, {&fits, 1}, on_device_0, {}).bytes, 100000u);
  stream.synchronize();
}

}  // namespace sluice::test
