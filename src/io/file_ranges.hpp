#pragma once
// Byte ranges of a file read into the caller's device memory through
// page-locked staging slots: the file is cut into chunks, and each of several
// lanes - a thread with a ring of its own on an executor of its own (a copy
// stream of its own on a GPU) - takes the next chunk no lane has taken, preads
// it into one of its staging slots while its copy lane carries the ones before
// to the device, until none is left (a lane slowed down takes fewer). The file
// crosses host memory once, and the reads and the link run at the same time.
// Ranges that follow each other closely in the file (a safetensors
// checkpoint's tensors, each into its own memory) share chunks. Host-only: it
// runs on any RingExecutor; on the host executor the "device" memory is host
// memory, which is how CI tests it.
//
// Why lanes of small chunks, not one ring whose large chunks every thread
// reads in pieces: such a ring waits at each chunk's end for its slowest
// piece before the chunk's copy is enqueued, and reached half the link from
// the page cache on an H100 host, where a bare program of independent lanes
// of 2 MiB chunks reached 0.89-0.95 of it, and these lanes 0.78-0.82 of it
// through sluice.load_file (docs/measurements.md).
//
//   read_file_ranges("model.safetensors", {{begin, bytes, tensor_memory}, ...},
//                    [](std::size_t) { return std::make_shared<CudaRingExecutor>(0, 0, file_read_staging_wait); }, {});
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "io/file_calls.hpp"
#include "ring/ring_executor.hpp"

namespace sluice::ring {

struct FileRange {
  std::uint64_t offset = 0;  // in the file
  std::size_t bytes = 0;
  std::byte* to = nullptr;   // the caller's device memory (host memory on the host executor)
};

struct FileReadOptions {
  std::size_t chunk_bytes = std::size_t{4} << 20;  // a ring position: bytes one lane reads at once; a multiple of 4096
                                                   // (CheckpointOptions says why 4 MiB)
  // Staging slots a lane: reads fill one while the copy lane reads the other; at most ahead + 1.
  // Two, not four: on one H100 host 12 lanes of 2 MiB chunks read a cached file onto the GPU at
  // 36.8 GB/s with two and 31.0 with four (fewer slots stay in the CPU's cache between the pread
  // that writes them and the copy that reads them); on another, 44.6 and 45.4 (within its spread).
  std::size_t staging = 2;
  std::size_t ahead = 3;    // chunks a lane reads beyond the one its consumer's lane last took
  unsigned threads = 0;     // lanes, a thread each; 0: 12, or StagingPool's default where fewer (at most one a chunk)
  // O_DIRECT where the file system takes it: reads skip the page cache (for a file that is
  // not cached and will not be read again). Unaligned heads and tails are read through the cache.
  bool direct = false;
  // The file the reads must come from, as it was when its header was read
  // (weights::SafetensorsHeader::file): a file renamed over the path since, or
  // written since (another size or modification time), is an IoError before a
  // byte is read. None: whatever file the path names when the read opens it.
  std::optional<sluice::detail::FileIdentity> expected_file = std::nullopt;
};

// Where one lane's time went: which engine held the read back. Reading most
// of the time, the storage (or the page cache's copies); putting well beyond
// reading, the link (each put waits for its staging slot's last copy).
struct LaneReport {
  std::size_t chunks = 0;         // copied whole
  std::uint64_t bytes = 0;        // of those chunks
  double reading_seconds = 0;     // in pread
  double putting_seconds = 0;     // handing chunks to the ring: the reads, and the waits for staging slots
  double ring_made_seconds = 0;   // from the read's start until the lane's ring was made (copy stream, slots, events)
  double started_seconds = 0;     // from the read's start until the lane's first pread began (0: it read none)
  double finished_seconds = 0;    // from the read's start until the lane's last copy was done
};

struct FileReadReport {
  std::uint64_t bytes = 0;  // copied to the caller's memory
  std::size_t chunks = 0;
  bool direct = false;      // whether the file system took O_DIRECT
  std::vector<LaneReport> lanes;  // read_file_ranges' lanes
};

// Makes lane k's executor, before any read.
using MakeExecutor = std::function<std::shared_ptr<RingExecutor>(std::size_t lane)>;

// The lanes a read of `chunks` chunks runs with these options.
std::size_t file_read_lanes(const FileReadOptions& options, std::size_t chunks);

// Reads every range into its `to`, and returns once every byte is there: the
// host waits for each lane's last copy, so any stream may use the memory
// after. The caller's memory must have no work pending on any stream.
// Refuses, before any read: bad options and a range without memory
// (std::invalid_argument), a file that cannot be opened, is not
// options.expected_file or has a range past its end (IoError naming the file);
// what make_executor throws. A read that fails or finds the file shorter stops
// every lane and is an IoError naming the file, the offset, the chunk and how
// many other chunks were on the device by then (each chunk is copied whole or
// not at all). A file whose size or modification time changed while it was
// read is an IoError once every byte is copied: the memory holds bytes of a
// file that was being written.
FileReadReport read_file_ranges(const std::filesystem::path& path, std::span<const FileRange> ranges,
                                const MakeExecutor& make_executor, const FileReadOptions& options);

// The share of the file's pages over [offset, offset + bytes) that the page
// cache holds now (mincore over up to 1024 pages, in runs spread evenly), 0 to 1:
// whether O_DIRECT would pay. 0 where the kernel cannot say. IoError for a file that cannot be opened or bytes past its end.
double cached_fraction(const std::filesystem::path& path, std::uint64_t offset, std::uint64_t bytes);

// Where read_file_ranges_to_host puts each chunk.
enum class ReadInto {
  // Into the lane's own chunk of the buffer, again and again: the destination
  // stays in the CPU's cache, the reads at their best.
  lane_chunk,
  // Chunk i at buffer + i x chunk_bytes, each written once: the destination
  // goes to memory, as the bytes a load reads must before its copy reads them.
  chunk_place,
};

// The reads of read_file_ranges alone, on as many lanes, with no copy: the
// storage's rate for the bound. `buffer` is page-locked where the reads go to
// a GPU next, 4096-aligned for O_DIRECT, and holds at least one chunk
// (lane_chunk: lanes beyond buffer / chunk_bytes are left out) or every chunk
// (chunk_place); else std::invalid_argument. FileReadReport::bytes: the bytes read.
FileReadReport read_file_ranges_to_host(const std::filesystem::path& path, std::span<const FileRange> ranges,
                                       std::span<std::byte> buffer, const FileReadOptions& options,
                                       ReadInto into = ReadInto::lane_chunk);

}  // namespace sluice::ring
