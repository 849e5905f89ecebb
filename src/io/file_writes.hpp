#pragma once
// The caller's device memory written into a file at byte ranges, through a
// ring to the host (ring/to_host_ring.hpp): the ranges are cut into chunks of
// page-locked staging slots, and while the copy lane carries chunk i + 1 off
// the device, the host's threads write chunk i out of its slot. The bytes
// cross host memory once, and the link and the writes run at the same time.
// Host-only: it runs on any RingExecutor; on the host executor the "device"
// memory is host memory, which is how CI tests it.
//
//   write_device_ranges({{tensor_memory, bytes, file_offset}, ...}, executor, lane, sink_write, {});
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ring/ring_executor.hpp"

namespace sluice::ring {

struct DeviceRange {
  const std::byte* from = nullptr;  // the caller's device memory (host memory on the host executor)
  std::size_t bytes = 0;
  std::uint64_t offset = 0;         // in the file
};

struct FileWriteOptions {
  std::size_t chunk_bytes = std::size_t{64} << 20;  // a ring position: bytes copied off the device at once
  std::size_t staging = 3;                          // staging slots: positions in flight (the ring's ahead)
  unsigned threads = 4;                             // threads that write one chunk at once
};

// Writes `bytes` at `offset` in the file; called from several threads at once.
using WriteAt = std::function<void(std::uint64_t offset, std::span<const std::byte> bytes)>;

// One chunk of the ranges: bytes in its staging slot, and where in the file
// each run of them goes (ranges that follow each other in the file share a run).
struct WriteRun {
  std::size_t at = 0;  // in the staging slot
  std::size_t bytes = 0;
  std::uint64_t offset = 0;  // in the file
};
struct WriteChunk {
  std::size_t bytes = 0;
  std::vector<CopyPiece> pieces;  // from the device into the staging slot
  std::vector<WriteRun> runs;
};
// The ranges (in the order given) cut into chunks of at most chunk_bytes.
std::vector<WriteChunk> write_chunks(std::span<const DeviceRange> ranges, std::size_t chunk_bytes);

// Copies every range off the device after the work enqueued on `lane` so far,
// and writes it with `write`; returns once every byte is written. `written`
// counts the bytes written as they are (how far a failed run got). Refuses,
// before any work: bad options and a range without memory
// (std::invalid_argument). A copy or a write that fails stops the run: a
// RingError naming the chunk and the step, with the write's own exception as
// its cause. The caller keeps the ranges' memory until it returns.
void write_device_ranges(std::span<const DeviceRange> ranges, RingExecutor& executor, ConsumerLane lane,
                         const WriteAt& write, const FileWriteOptions& options, std::atomic<std::uint64_t>& written);

}  // namespace sluice::ring
