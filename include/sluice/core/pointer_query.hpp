#pragma once
// Which kind of memory a pointer refers to, asked of the driver. The driver
// does not tell cudaHostAlloc memory from cudaHostRegister memory; sluice
// reports `registered` for ranges that live sluice::HostRegistration objects
// cover and `pinned` for other page-locked memory.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "sluice/core/memory_kind.hpp"

namespace sluice {

MemoryKind memory_kind(const void* ptr);

// A stretch of a range that lies in one allocation or registration.
struct MemoryExtent {
  std::size_t offset = 0;  // from the range's start
  std::size_t bytes = 0;
  MemoryKind kind = MemoryKind::pageable;
  // Which page-locking this is (0 for memory that is not page-locked): the
  // driver's id of the allocation or registration, unique over the process's
  // life, and the sluice::HostRegistration's own number where one covers it.
  // Memory unlocked and locked again at the same address gets new ones: a
  // copy captured in a CUDA graph is valid only for the locking it saw.
  std::uint64_t allocation_id = 0;
  std::uint64_t registration = 0;
};

// [ptr, ptr + bytes) cut where allocations and registrations begin and end,
// walked allocation by allocation (not sampled). The walk stops at the first
// byte that is not page-locked host memory: that extent runs to the end of
// the range with its kind. A copy engine transfer must stay inside one
// extent: a cudaMemcpyAsync across two registrations fails.
std::vector<MemoryExtent> memory_extents(const void* ptr, std::size_t bytes);

// The kind of a whole range: pageable if any byte of it is, device or
// managed if it starts there, registered when every extent is, else pinned.
MemoryKind memory_kind(const void* ptr, std::size_t bytes);

}  // namespace sluice
