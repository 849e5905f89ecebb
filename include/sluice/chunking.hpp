#pragma once
// The chunk sizes a pipeline uses when the caller sets none. Host-only.
//
// The largest chunk is sqrt(bytes x 0.5 MiB) of the widest span, within
// [1 MiB, 16 MiB]: a larger chunk lengthens the fill and drain (the first
// copy in and the last copy out run alone), more chunks pay more fixed costs
// (an event wait, a launch, a hand-off); the square root balances the two,
// and matched the best of measured sweeps from 4 MiB to 1 GiB. The ramp
// starts at 1/8 of the largest chunk, at least 128 KiB. Data of 2 MiB or
// less is one chunk: below that, splitting costs more than it overlaps.
// `sluice tune` measures these choices against a sweep.
#include <cstddef>

#include "sluice/chunk_plan.hpp"
#include "sluice/pipeline_options.hpp"

namespace sluice {

struct Chunking {
  std::size_t chunk_items = 1;  // the largest chunk
  std::size_t first_items = 1;  // where the ramp starts; == chunk_items for none
};

Chunking default_chunking(std::size_t item_count, std::size_t widest_item_bytes);

// The plan a pipeline with these options cuts `item_count` items into. A
// chunk size set in the options means chunks of that size, ramped only when
// first_chunk_items is set too.
ChunkPlan plan_chunks(const PipelineOptions& options, std::size_t item_count, std::size_t widest_item_bytes);

}  // namespace sluice
