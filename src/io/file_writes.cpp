#include "io/file_writes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>  // std::exchange (it did not build without it)

#include "core/staging_pool.hpp"
#include "ring/to_host_ring.hpp"

namespace sluice::ring {

namespace {

// A write piece below this is not worth a thread of its own.
constexpr std::size_t min_write_piece = std::size_t{4} << 20;

void check(std::span<const DeviceRange> ranges, const FileWriteOptions& options) {
  if (options.chunk_bytes == 0) throw std::invalid_argument("file writes: chunk_bytes must be at least 1");
  if (options.staging == 0) throw std::invalid_argument("file writes: at least one staging slot");
  if (options.threads == 0) throw std::invalid_argument("file writes: at least one thread");
  for (const DeviceRange& r : ranges) {
    if (r.bytes > 0 && !r.from) throw std::invalid_argument("file writes: a range with no memory to copy from");
    if (r.bytes > UINT64_MAX - r.offset)
      throw std::invalid_argument(fmt::format("file writes: a range of {} bytes at offset {} ends past 2^64", r.bytes, r.offset));
  }
}

// Writes the staging slot's [at, at + bytes) to where its runs go in the file.
void write_span(const WriteChunk& chunk, std::span<const std::byte> staged, std::size_t at, std::size_t bytes,
                const WriteAt& write) {
  const std::size_t end = at + bytes;
  for (const WriteRun& run : chunk.runs) {
    const std::size_t from = std::max(at, run.at), to = std::min(end, run.at + run.bytes);
    if (from < to) write(run.offset + (from - run.at), staged.subspan(from, to - from));
  }
}

}  // namespace

std::vector<WriteChunk> write_chunks(std::span<const DeviceRange> ranges, std::size_t chunk_bytes) {
  std::vector<WriteChunk> chunks;
  WriteChunk chunk;
  for (const DeviceRange& r : ranges) {
    for (std::size_t at = 0; at < r.bytes;) {
      if (chunk.bytes == chunk_bytes) chunks.push_back(std::exchange(chunk, {}));
      const std::size_t n = std::min(r.bytes - at, chunk_bytes - chunk.bytes);
      chunk.pieces.push_back({r.from + at, chunk.bytes, n});
      WriteRun* last = chunk.runs.empty() ? nullptr : &chunk.runs.back();
      if (last && last->offset + last->bytes == r.offset + at)
        last->bytes += n;
      else
        chunk.runs.push_back({chunk.bytes, n, r.offset + at});
      chunk.bytes += n;
      at += n;
    }
  }
  if (chunk.bytes > 0) chunks.push_back(std::move(chunk));
  return chunks;
}

void write_device_ranges(std::span<const DeviceRange> ranges, RingExecutor& executor, ConsumerLane lane,
                         const WriteAt& write, const FileWriteOptions& options, std::atomic<std::uint64_t>& written) {
  check(ranges, options);
  const std::vector<WriteChunk> chunks = write_chunks(ranges, options.chunk_bytes);
  if (chunks.empty()) return;
  std::size_t largest = 0;
  for (const WriteChunk& c : chunks) largest = std::max(largest, c.bytes);
  RingOptions o;
  o.items = chunks.size();
  o.direction = Direction::to_host;
  o.ahead = o.staging_slots = std::min(options.staging, chunks.size());
  o.slot_bytes = largest;
  StagingPool writers(options.threads);
  const std::size_t piece = std::max(min_write_piece, (options.chunk_bytes + options.threads - 1) / options.threads);
  ToHostRing ring(RingPlan(o), executor);
  for (const WriteChunk& chunk : chunks) {
    ring.put({chunk.bytes, chunk.pieces,
              [&](std::span<const std::byte> staged) {
                writers.run(chunk.bytes, piece, [&](std::size_t at, std::size_t bytes) {
                  write_span(chunk, staged, at, bytes, write);
                  written += bytes;
                });
              }},
             lane);
  }
  ring.finish();
}

}  // namespace sluice::ring
