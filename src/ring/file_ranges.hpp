#pragma once
// Byte ranges of a file read into the caller's device memory through a
// ring's page-locked staging slots: the staging threads pread one chunk into
// a slot while the copy lane carries the chunk before it to the device, so
// the file crosses host memory once and the reads and the link run at the
// same time. Ranges that follow each other closely in the file (a safetensors
// checkpoint's tensors, each into its own memory) share chunks. Host-only: it
// runs on any RingExecutor; on the host executor the "device" memory is host
// memory, which is how CI tests it.
//
//   read_file_ranges("model.safetensors", {{begin, bytes, tensor_memory}, ...}, executor, {stream}, {});
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "ring/ring_executor.hpp"

namespace sluice::ring {

struct FileRange {
  std::uint64_t offset = 0;  // in the file
  std::size_t bytes = 0;
  std::byte* to = nullptr;   // the caller's device memory (host memory on the host executor)
};

struct FileReadOptions {
  std::size_t chunk_bytes = std::size_t{32} << 20;  // bytes a staging slot holds; a multiple of 4096
  std::size_t staging = 3;  // staging slots: reads fill one while the copy lane reads another; at most ahead + 1
  std::size_t ahead = 2;    // chunks read beyond the one the consumer's lane last took
  unsigned threads = 0;     // staging threads reading each chunk in parallel pieces; 0: StagingPool's default
  // O_DIRECT where the file system takes it: reads skip the page cache (for a file that is
  // not cached and will not be read again). Unaligned heads and tails are read through the cache.
  bool direct = false;
};

struct FileReadReport {
  std::uint64_t bytes = 0;  // copied to the caller's memory
  std::size_t chunks = 0;
  bool direct = false;      // whether the file system took O_DIRECT
};

// Reads every range into its `to`, and returns once every byte is there (the
// host waits for the last copy, as the staging slots go back) and `lane`
// (the consumer's stream) has waited for each chunk. The caller's memory
// must have no work pending on another stream. Refuses, before any read:
// bad options and a range without memory (std::invalid_argument), a file
// that cannot be opened or a range past its end (IoError naming the file).
// A read that fails or finds the file shorter is an IoError naming the file,
// the offset and how many of the bytes were on the device by then.
FileReadReport read_file_ranges(const std::filesystem::path& path, std::span<const FileRange> ranges,
                                RingExecutor& executor, ConsumerLane lane, const FileReadOptions& options);

// The share of the file's pages over [offset, offset + bytes) that the page
// cache holds now (mincore), 0 to 1: whether O_DIRECT would pay. 0 where the
// kernel cannot say. IoError for a file that cannot be opened or bytes past its end.
double cached_fraction(const std::filesystem::path& path, std::uint64_t offset, std::uint64_t bytes);

// The reads of read_file_ranges alone, every chunk in turn into `buffer`
// (page-locked, at least options.chunk_bytes, 4096-aligned for O_DIRECT):
// the storage's rate for the bound. FileReadReport::bytes: the bytes read.
FileReadReport read_file_ranges_to_host(const std::filesystem::path& path, std::span<const FileRange> ranges,
                                       std::span<std::byte> buffer, const FileReadOptions& options);

}  // namespace sluice::ring
