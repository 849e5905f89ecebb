#include "sluice/pointer_query.hpp"

#include <cuda_runtime_api.h>

#include "sluice/error.hpp"
#include "sluice/host_registration.hpp"

namespace sluice {

namespace {
MemoryKind driver_kind(const void* ptr) {
  cudaPointerAttributes attributes{};
  SLUICE_CUDA_CHECK(cudaPointerGetAttributes(&attributes, ptr));
  switch (attributes.type) {
    case cudaMemoryTypeHost: return MemoryKind::pinned;
    case cudaMemoryTypeDevice: return MemoryKind::device;
    case cudaMemoryTypeManaged: return MemoryKind::managed;
    case cudaMemoryTypeUnregistered:
    default: return MemoryKind::pageable;
  }
}
}  // namespace

MemoryKind memory_kind(const void* ptr) {
  const MemoryKind kind = driver_kind(ptr);
  if (kind == MemoryKind::pinned && HostRegistration::covers(ptr, 1)) return MemoryKind::registered;
  return kind;
}

MemoryKind memory_kind(const void* ptr, std::size_t bytes) {
  if (bytes <= 1) return memory_kind(ptr);
  const MemoryKind first = memory_kind(ptr);
  const MemoryKind last = memory_kind(static_cast<const char*>(ptr) + bytes - 1);
  if (first == last) {
    if (first == MemoryKind::registered && !HostRegistration::covers(ptr, bytes)) return MemoryKind::pinned;
    return first;
  }
  if (is_page_locked_host(first) && is_page_locked_host(last)) return MemoryKind::pinned;
  return first == MemoryKind::device || first == MemoryKind::managed ? first : MemoryKind::pageable;
}

}  // namespace sluice
