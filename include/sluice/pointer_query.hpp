#pragma once
// Which kind of memory a pointer refers to, asked of the driver
// (cudaPointerGetAttributes). The driver does not tell cudaHostAlloc memory
// from cudaHostRegister memory; sluice reports `registered` for ranges that a
// live sluice::HostRegistration covers and `pinned` for other page-locked memory.
#include <cstddef>

#include "sluice/memory_kind.hpp"

namespace sluice {

MemoryKind memory_kind(const void* ptr);

// The kind of a whole range: page-locked only when its first and last bytes
// both are (a range that is partly pageable must be staged as pageable).
MemoryKind memory_kind(const void* ptr, std::size_t bytes);

}  // namespace sluice
