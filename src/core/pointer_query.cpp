#include "sluice/pointer_query.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

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

// cuPointerGetAttribute through the runtime's driver entry point, so sluice
// needs no link against libcuda itself.
using PointerAttributeFn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);

PointerAttributeFn pointer_attribute_fn() {
  static PointerAttributeFn fn = [] {
    void* raw = nullptr;
    cudaDriverEntryPointQueryResult found{};
    SLUICE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &raw, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess) throw CudaError(cudaErrorSymbolNotFound, "cuPointerGetAttribute lookup", __FILE__, __LINE__);
    return reinterpret_cast<PointerAttributeFn>(raw);
  }();
  return fn;
}

// The allocation or registration holding a page-locked address: [start, start + size).
std::pair<const char*, std::size_t> locked_range(const char* p) {
  CUdeviceptr start = 0;
  std::size_t size = 0;
  const auto fn = pointer_attribute_fn();
  const CUresult a = fn(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, reinterpret_cast<CUdeviceptr>(p));
  const CUresult b = fn(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, reinterpret_cast<CUdeviceptr>(p));
  if (a != CUDA_SUCCESS || b != CUDA_SUCCESS || size == 0) {
    // The driver would not say: claim no more than the rest of this page,
    // which page-locking covers whole.
    constexpr std::size_t page = 4096;
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    return {p, page - at % page};
  }
  return {reinterpret_cast<const char*>(start), size};
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
    const MemoryKind kind = memory_kind(p);
    const std::size_t offset = static_cast<std::size_t>(p - begin);
    if (!is_page_locked_host(kind)) {
      extents.push_back({offset, bytes - offset, kind});
      break;
    }
    const auto [start, size] = locked_range(p);
    const char* stop = std::min(end, start + size);
    if (stop <= p) stop = p + 1;
    const bool registered = HostRegistration::covers(p, static_cast<std::size_t>(stop - p));
    extents.push_back({offset, static_cast<std::size_t>(stop - p), registered ? MemoryKind::registered : MemoryKind::pinned});
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
