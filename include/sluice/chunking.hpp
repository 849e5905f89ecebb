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
//
// A run whose host copies data through the pinned slots both ways (staged
// spans, sources and sinks, in and out) keeps its chunks within [4 MiB,
// 8 MiB] where the data allows eight chunks or more. Staged runs on the
// H200's host (medians of interleaved runs): 1 GiB per array in 16 MiB
// chunks took 31.1 ms for copy, 56.9 vadd, 33.5 sincos20, in 8 MiB chunks
// 26.4, 45.9, 28.8; 32 MiB in 2.8 MiB chunks 2.06, 2.28, 1.74, in 4 MiB
// chunks 1.46, 1.98, 1.37. There the staging threads and both copy engines
// share host memory, and larger slots likely fall out of the last-level
// cache (each is written by the threads and read by a copy engine every few
// chunks); smaller chunks pay the hand-off between a copy and the staging of
// its slot (0.1-0.3 ms in the timelines) too often. A run whose host copies
// one way only keeps the usual sizes: a 2 GiB reduction read from a file
// took 45 ms in 16 MiB chunks and 79 ms in 8 MiB (from a staged array, 44
// and 52).
#include <cstddef>

#include "sluice/chunk_plan.hpp"
#include "sluice/pipeline_options.hpp"

namespace sluice {

struct Chunking {
  std::size_t chunk_items = 1;  // the largest chunk
  std::size_t first_items = 1;  // where a ramp starts; == chunk_items for none (the default)
};

// `host_copies_both_ways`: the host copies the run's data through the pinned
// slots on the way in and on the way out.
Chunking default_chunking(std::size_t item_count, std::size_t widest_item_bytes, bool host_copies_both_ways = false);

// The plan a pipeline with these options cuts `item_count` items into. A
// chunk size set in the options means chunks of that size, ramped only when
// first_chunk_items is set too.
ChunkPlan plan_chunks(const PipelineOptions& options, std::size_t item_count, std::size_t widest_item_bytes,
                      bool host_copies_both_ways = false);

}  // namespace sluice
