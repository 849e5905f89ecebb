#include "sluice/core/pointer_query.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "sluice/core/error.hpp"
#include "sluice/core/host_registration.hpp"

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

// cuPointerGetAttributes through the runtime's driver entry point, so sluice
// needs no link against libcuda itself: one call gives what kind of memory
// an address is in and the allocation or registration that holds it.
using PointerAttributesFn = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);

PointerAttributesFn pointer_attributes_fn() {
  static PointerAttributesFn fn = [] {
    void* raw = nullptr;
    cudaDriverEntryPointQueryResult found{};
    SLUICE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &raw, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess) throw CudaError(cudaErrorSymbolNotFound, "cuPointerGetAttributes lookup", __FILE__, __LINE__);
    return reinterpret_cast<PointerAttributesFn>(raw);
  }();
  return fn;
}

struct Lookup {
  MemoryKind kind = MemoryKind::pageable;  // as the driver sees it (pinned, not yet registered)
  const char* start = nullptr;             // the allocation or registration holding a page-locked address
  std::size_t size = 0;
  std::uint64_t allocation_id = 0;         // the driver's id of that allocation or registration; 0 if unknown
};

// Asked apart from the rest: a driver that cannot say it for some memory
// must not cost the kind and range of that memory.
std::uint64_t allocation_id(const char* p) {
  unsigned long long id = 0;
  CUpointer_attribute what[] = {CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void* into[] = {&id};
  if (pointer_attributes_fn()(1, what, into, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) return 0;
  return id;
}

Lookup look_up(const char* p) {
  CUmemorytype type{};
  CUdeviceptr start = 0;
  std::size_t size = 0;
  int managed = 0;
  CUpointer_attribute what[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void* into[] = {&type, &start, &size, &managed};
  if (pointer_attributes_fn()(4, what, into, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
    return {driver_kind(p), nullptr, 0};  // the driver would not say at once: ask the runtime
  Lookup found;
  if (managed) found.kind = MemoryKind::managed;
  else if (type == CU_MEMORYTYPE_HOST) found.kind = MemoryKind::pinned;
  else if (type == CU_MEMORYTYPE_DEVICE) found.kind = MemoryKind::device;
  else found.kind = MemoryKind::pageable;  // unregistered host memory: the driver reports no type
  if (found.kind == MemoryKind::pinned) {
    found.start = reinterpret_cast<const char*>(start);
    found.size = size;
    found.allocation_id = allocation_id(p);
  }
  return found;
}

// The allocation or registration holding a page-locked address: [start, start + size).
std::pair<const char*, std::size_t> locked_range(const char* p, const Lookup& found) {
  if (found.size == 0) {
    // The driver would not say: claim no more than the rest of this page,
    // which page-locking covers whole.
    constexpr std::size_t page = 4096;
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    return {p, page - at % page};
  }
  return {found.start, found.size};
}

}  // namespace

MemoryKind memory_kind(const void* ptr) {
  const MemoryKind kind = driver_kind(ptr);
  if (kind == MemoryKind::pinned && HostRegistration::covers(ptr, 1)) return MemoryKind::registered;
  return kind;
}

std::vector<MemoryExtent> memory_extents(const void* ptr, std::size_t bytes) {
  std::vector<MemoryExtent> extents;
  const auto* begin = static_cast<const char*>(ptr);
  const char* end = begin + bytes;
  for (const char* p = begin; p < end;) {
    const Lookup found = look_up(p);  // one driver call per extent
    const std::size_t offset = static_cast<std::size_t>(p - begin);
    if (!is_page_locked_host(found.kind)) {
      extents.push_back({offset, bytes - offset, found.kind});
      break;
    }
    const auto [start, size] = locked_range(p, found);
    const char* stop = std::min(end, start + size);
    if (stop <= p) stop = p + 1;
    const std::uint64_t registration = HostRegistration::number_covering(p, static_cast<std::size_t>(stop - p));
    extents.push_back({offset, static_cast<std::size_t>(stop - p),
                       registration != 0 ? MemoryKind::registered : MemoryKind::pinned, found.allocation_id,
                       registration});
    p = stop;
  }
  return extents;
}

MemoryKind memory_kind(const void* ptr, std::size_t bytes) {
  if (bytes <= 1) return memory_kind(ptr);
  const auto extents = memory_extents(ptr, bytes);
  bool all_registered = true;
  for (const auto& e : extents) {
    if (!is_page_locked_host(e.kind)) return e.kind;  // pageable, device or managed: the whole range is that
    all_registered &= e.kind == MemoryKind::registered;
  }
  return all_registered ? MemoryKind::registered : MemoryKind::pinned;
}

}  // namespace sluice
