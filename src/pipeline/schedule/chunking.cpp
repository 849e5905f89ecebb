#include "chunking.hpp"

#include <algorithm>
#include <cmath>

namespace sluice {

bool kernels_dominate(double kernel_ms, double h2d_ms, double d2h_ms) {
  return kernel_ms > 1.25 * std::max(h2d_ms, d2h_ms);
}

Chunking default_chunking(std::size_t item_count, std::size_t widest_item_bytes, RunFacts run) {
  constexpr std::size_t KiB = 1024, MiB = KiB * KiB;
  // The smallest chunk whose host work (about 12 us a chunk) a dominating
  // kernel hides: where a ramp starts, or every chunk (chunking.hpp).
  constexpr std::size_t kernel_bound_small_bytes = 512 * KiB;
  if (item_count == 0 || widest_item_bytes == 0) return {1, 1};
  const std::size_t bytes = item_count * widest_item_bytes;
  auto items_of = [&](std::size_t b) { return std::min(item_count, std::max<std::size_t>(1, b / widest_item_bytes)); };
  const bool kernel_bound = run.kernel_bound && !run.host_copies_both_ways;
  std::size_t chunk_bytes = 0;
  if (bytes <= 2 * MiB) {
    // One chunk, unless the kernels dominate: then chunks of 1 MiB at most, cut as below.
    if (!kernel_bound) return {item_count, item_count};
    chunk_bytes = MiB;
  } else {
    // The fill and drain grow with the chunk, the per-chunk costs with the
    // number of chunks: the sum is least near sqrt(bytes * 0.25 MiB), which is
    // where the measured sweeps put the best chunk (4 MiB data: 1 MiB, 32 MiB:
    // 2-4 MiB, 256 MiB: 4-8 MiB, 1 GiB: 16 MiB).
    const auto root = static_cast<std::size_t>(std::sqrt(static_cast<double>(bytes) * static_cast<double>(MiB / 4)));
    chunk_bytes = std::clamp(root, 1 * MiB, 16 * MiB);
    if (run.host_copies_both_ways) chunk_bytes = std::clamp(chunk_bytes, std::min(4 * MiB, bytes / 8), 4 * MiB);  // chunking.hpp says why
  }
  const std::size_t chunk = items_of(chunk_bytes);
  if (!kernel_bound) return {chunk, chunk};
  // Where the kernels dominate (chunking.hpp has the measurements).
  if (run.replayed) return {chunk, std::min(chunk, items_of(std::max(64 * KiB, chunk_bytes / 16)))};
  if (run.kernels_overlap && chunk_bytes <= 2 * MiB) {
    const std::size_t equal = items_of(kernel_bound_small_bytes);
    return {equal, equal};
  }
  return {chunk, std::min(chunk, items_of(kernel_bound_small_bytes))};
}

bool may_adapt_chunks(const PipelineOptions& options) {
  return options.adapt_chunks && options.chunk_items == 0 && options.first_chunk_items == 0 && options.ramp;
}

ChunkPlan plan_chunks(const PipelineOptions& options, std::size_t items, std::size_t widest_item_bytes, RunFacts run) {
  run.kernel_bound = run.kernel_bound && may_adapt_chunks(options);
  run.kernels_overlap = compute_stream_count(options) > 1;
  Chunking chunking = options.chunk_items > 0 ? Chunking{options.chunk_items, options.chunk_items}
                                              : default_chunking(items, widest_item_bytes, run);
  if (options.first_chunk_items > 0) chunking.first_items = options.first_chunk_items;
  if (!options.ramp) chunking.first_items = chunking.chunk_items;
  // A slot never needs more than all items.
  chunking.chunk_items = std::max<std::size_t>(1, std::min(chunking.chunk_items, items));
  chunking.first_items = std::max<std::size_t>(1, std::min(chunking.first_items, chunking.chunk_items));
  if (chunking.first_items >= chunking.chunk_items) return ChunkPlan(items, chunking.chunk_items);
  return ChunkPlan::ramped(items, chunking.chunk_items, chunking.first_items);
}

}  // namespace sluice
