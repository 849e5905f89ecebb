#pragma once
// Where a pointer's memory lives, in the terms that decide how it can be
// copied: only page-locked host memory can be read by the copy engines
// directly; pageable memory must be staged. Host-only.
#include <string_view>

namespace sluice {

enum class MemoryKind {
  pageable,    // ordinary host memory (malloc, new, std::vector)
  pinned,      // page-locked by cudaHostAlloc/cudaMallocHost (or registered outside sluice)
  registered,  // page-locked by a live sluice::HostRegistration
  device,      // device memory
  managed,     // cudaMallocManaged
};

constexpr std::string_view to_string(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::pageable: return "pageable";
    case MemoryKind::pinned: return "pinned";
    case MemoryKind::registered: return "registered";
    case MemoryKind::device: return "device";
    case MemoryKind::managed: return "managed";
  }
  return "unknown";
}

// True where a copy engine can DMA straight from/to this memory.
constexpr bool is_page_locked_host(MemoryKind kind) {
  return kind == MemoryKind::pinned || kind == MemoryKind::registered;
}

}  // namespace sluice
