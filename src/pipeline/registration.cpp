// Page-locking a pageable span in place (HostMemoryPolicy::register_memory
// and ::automatic), as one registration per span.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>

#include "engine.hpp"
#include "sluice/device_scope.hpp"
#include "sluice/error.hpp"
#include "sluice/pointer_query.hpp"

namespace sluice::detail {

namespace {

// Read-only mappings (an mmap'd input file) register only as read-only; any
// other memory is registered writable, since a page at an input's edge may
// hold an output's first bytes too, which a D2H copy must be able to write.
bool read_only_supported(int device) {
  int supported = 0;
  const bool known = cudaDeviceGetAttribute(&supported, cudaDevAttrHostRegisterReadOnlySupported, device) == cudaSuccess;
  (void)cudaGetLastError();
  return known && supported != 0;
}

// Registrations run one at a time in the process: a span's edge pages are
// checked for a neighbour's registration first, which only holds if no
// neighbour is registering at the same moment. On 4 KiB pages, registering
// with more threads was no faster (measured: 25 GB/s with 1, 27 with 4).
std::mutex& registration_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

SpanRegistration::~SpanRegistration() { release(); }

void SpanRegistration::register_span(const void* data, std::size_t bytes, bool read_only, int device) {
  const std::lock_guard serial(registration_mutex());
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  auto begin = reinterpret_cast<std::uintptr_t>(data) / page * page;
  auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes + page - 1) / page * page;
  // A first or last page shared with memory that is already page-locked (a
  // neighbouring span's registration, small arrays side by side on the heap)
  // stays as it is: registering it again would fail, and its bytes can be
  // copied directly already.
  auto locked = [](std::uintptr_t at) { return is_page_locked_host(memory_kind(reinterpret_cast<const void*>(at))); };
  while (begin < end && locked(begin)) begin += page;
  while (end > begin && locked(end - page)) end -= page;
  if (begin == end) return;
  // One registration for the whole span: another library that sees the
  // memory as page-locked (PyTorch's pin_memory() does) may copy any part of
  // it in one transfer, and a transfer may not cross two registrations.
  const DeviceScope scope(device);
  void* at = reinterpret_cast<void*>(begin);
  HostRegistration registration;
  try {
    registration = HostRegistration(at, end - begin, cudaHostRegisterPortable);
  } catch (const CudaError&) {
    if (!read_only || !read_only_supported(device)) throw;
    registration = HostRegistration(at, end - begin, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
  }
  std::lock_guard lock(mutex_);
  registration_ = std::move(registration);
}

void SpanRegistration::register_now(const void* data, std::size_t bytes, bool read_only, int device) {
  started_ = true;
  register_span(data, bytes, read_only, device);
  complete_ = true;
}

void SpanRegistration::register_in_background(StagingPool& registrar, const void* data, std::size_t bytes, bool read_only,
                                              int device) {
  started_ = true;
  background_ = registrar.submit(1, 1, [this, data, bytes, read_only, device](std::size_t, std::size_t) {
    try {
      register_span(data, bytes, read_only, device);
      complete_ = true;
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex_);
      failure_ = e.what();
    }
  });
}

void SpanRegistration::wait() const {
  if (background_) background_->wait();  // its piece catches everything: this never throws
}

std::string SpanRegistration::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void SpanRegistration::release() {
  wait();
  background_.reset();
  complete_ = false;
  std::lock_guard lock(mutex_);
  registration_ = HostRegistration{};
}

}  // namespace sluice::detail
