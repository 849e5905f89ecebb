#pragma once
// memcpy with non-temporal (streaming) stores: the destination's cache lines
// are written straight to memory instead of being read first and kept in the
// cache. For stage-out into the caller's large pageable arrays this doubled
// the copy rate on the 16-core test host (16 threads: 151 vs 67 GB/s);
// stage-in into small pinned slots, which stay in the last-level cache for
// the DMA to read, is faster with plain memcpy. Host-only.
#include <cstddef>

namespace sluice::detail {

void copy_streaming(void* dst, const void* src, std::size_t bytes) noexcept;

}  // namespace sluice::detail
