#include "sluice/core/host_registration.hpp"

#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "core/page_lock_ledger.hpp"
#include "sluice/core/error.hpp"

namespace sluice {

namespace {
// Live registrations by start address, so memory_kind() can say `registered`.
struct Registry {
  struct Range {
    std::size_t bytes = 0;
    std::uint64_t number = 0;
  };
  std::mutex mutex;
  std::map<const char*, Range> ranges;
  std::uint64_t last_number = 0;
};
Registry& registry() {
  static Registry instance;
  return instance;
}
}  // namespace

HostRegistration::HostRegistration(void* ptr, std::size_t bytes, unsigned flags) {
  if (ptr == nullptr) throw std::invalid_argument("HostRegistration: null pointer");
  if (bytes == 0) throw std::invalid_argument("HostRegistration: zero bytes");
  SLUICE_CUDA_CHECK(cudaHostRegister(ptr, bytes, flags));
  ptr_ = ptr;
  bytes_ = bytes;
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.ranges[static_cast<const char*>(ptr)] = {bytes, ++r.last_number};
  detail::ledger_locked(ptr, bytes);
}

HostRegistration::~HostRegistration() { release(); }

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void HostRegistration::release() noexcept {
  if (ptr_ == nullptr) return;
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    r.ranges.erase(static_cast<const char*>(ptr_));
  }
  const cudaError_t unregistered = cudaHostUnregister(ptr_);
  detail::ledger_unlocked(ptr_, unregistered != cudaSuccess);
  SLUICE_CUDA_CHECK_NOTHROW(unregistered);
  ptr_ = nullptr;
  bytes_ = 0;
}

bool HostRegistration::covers(const void* ptr, std::size_t bytes) { return number_covering(ptr, bytes) != 0; }

std::uint64_t HostRegistration::number_covering(const void* ptr, std::size_t bytes) {
  const auto* p = static_cast<const char*>(ptr);
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.ranges.upper_bound(p);
  if (it == r.ranges.begin()) return 0;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second.bytes ? it->second.number : 0;
}

}  // namespace sluice
