#pragma once
// The chunk sizes a pipeline uses when the caller sets none. Host-only.
//
// The chunk is sqrt(bytes x 0.25 MiB) of the widest span, within [1 MiB,
// 16 MiB], every chunk the same size: a larger chunk lengthens the fill and
// drain (the first copy in and the last copy out run alone), more chunks pay
// more fixed costs (an event wait, a launch, a gap of a few microseconds
// between copies); the square root balances the two. Data of 2 MiB or less
// is one chunk: below that, splitting costs more than it overlaps.
//
// No ramp by default: with both copy directions busy, a chunk that doubles
// the last one keeps the D2H waiting for its H2D, so the fill is no shorter
// than with equal chunks, and `sluice tune` on the H200 (final rounds) put
// equal chunks ahead on copy-bound work (copy 256 MiB: 8 MiB chunks 5.71 ms,
// the earlier ramped default 5.85; sincos20 5.86 against 6.42; 4 MiB: 0.189
// against 0.211 ms), within 1 % behind on compute-bound work. A ramp stays one
// option away (PipelineOptions::first_chunk_items).
#include <cstddef>

#include "sluice/chunk_plan.hpp"
#include "sluice/pipeline_options.hpp"

namespace sluice {

struct Chunking {
  std::size_t chunk_items = 1;  // the largest chunk
  std::size_t first_items = 1;  // where a ramp starts; == chunk_items for none (the default)
};

Chunking default_chunking(std::size_t item_count, std::size_t widest_item_bytes);

// The plan a pipeline with these options cuts `item_count` items into. A
// chunk size set in the options means chunks of that size, ramped only when
// first_chunk_items is set too.
ChunkPlan plan_chunks(const PipelineOptions& options, std::size_t item_count, std::size_t widest_item_bytes);

}  // namespace sluice
