#include "chunking.hpp"

#include <algorithm>
#include <cmath>

namespace sluice {

bool kernels_dominate(double kernel_ms, double h2d_ms, double d2h_ms) {
  return kernel_ms > 1.25 * std::max(h2d_ms, d2h_ms);
}

Chunking default_chunking(std::size_t item_count, std::size_t widest_item_bytes, bool host_copies_both_ways,
                          bool kernel_bound, bool replayed) {
  constexpr std::size_t KiB = 1024, MiB = KiB * KiB;
  if (item_count == 0 || widest_item_bytes == 0) return {1, 1};
  const std::size_t bytes = item_count * widest_item_bytes;
  auto items_of = [&](std::size_t b) { return std::max<std::size_t>(1, b / widest_item_bytes); };
  const bool ramp = kernel_bound && !host_copies_both_ways;
  // Where a ramp starts for a chunk of `chunk_bytes` (chunking.hpp says why).
  auto first_ramp = [&](std::size_t chunk_bytes) {
    return std::min(item_count, items_of(replayed ? std::max(64 * KiB, chunk_bytes / 16) : 512 * KiB));
  };
  if (bytes <= 2 * MiB)
    return ramp ? Chunking{std::min(item_count, items_of(MiB)), first_ramp(MiB)} : Chunking{item_count, item_count};
  // The fill and drain grow with the chunk, the per-chunk costs with the
  // number of chunks: the sum is least near sqrt(bytes * 0.25 MiB), which is
  // where the measured sweeps put the best chunk (4 MiB data: 1 MiB, 32 MiB:
  // 2-4 MiB, 256 MiB: 4-8 MiB, 1 GiB: 16 MiB).
  const auto root = static_cast<std::size_t>(std::sqrt(static_cast<double>(bytes) * static_cast<double>(MiB / 4)));
  std::size_t chunk_bytes = std::clamp(root, 1 * MiB, 16 * MiB);
  if (host_copies_both_ways) chunk_bytes = std::clamp(chunk_bytes, std::min(4 * MiB, bytes / 8), 4 * MiB);  // chunking.hpp says why
  const std::size_t chunk = std::min(items_of(chunk_bytes), item_count);
  return {chunk, ramp ? std::min(chunk, first_ramp(chunk_bytes)) : chunk};
}

ChunkPlan plan_chunks(const PipelineOptions& options, std::size_t items, std::size_t widest_item_bytes,
                      bool host_copies_both_ways, bool kernel_bound, bool replayed) {
  Chunking chunking = options.chunk_items > 0
                          ? Chunking{options.chunk_items, options.chunk_items}
                          : default_chunking(items, widest_item_bytes, host_copies_both_ways,
                                             kernel_bound && options.adapt_chunks, replayed);
  if (options.first_chunk_items > 0) chunking.first_items = options.first_chunk_items;
  if (!options.ramp) chunking.first_items = chunking.chunk_items;
  // A slot never needs more than all items.
  chunking.chunk_items = std::max<std::size_t>(1, std::min(chunking.chunk_items, items));
  chunking.first_items = std::max<std::size_t>(1, std::min(chunking.first_items, chunking.chunk_items));
  if (chunking.first_items >= chunking.chunk_items) return ChunkPlan(items, chunking.chunk_items);
  return ChunkPlan::ramped(items, chunking.chunk_items, chunking.first_items);
}

}  // namespace sluice
