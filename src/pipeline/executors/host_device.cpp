#include "host_device.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <utility>

namespace sluice::detail {

namespace {
constexpr std::size_t page = 4096;
}  // namespace

std::byte* HostDevice::allocate(std::size_t bytes, MemoryKind kind) {
  if (take_fault(InjectedFault::Kind::allocation)) throw HostExecutorError("host executor: an injected allocation failure");
  std::lock_guard lock(mutex_);
  if (kind == MemoryKind::device && device_used_ + bytes > options_.device_bytes)
    throw HostExecutorError("host executor: out of device memory");
  // Whole pages of its own, as cudaMalloc's and cudaHostAlloc's memory lies
  // apart from the heap: a caller's page-locking, which takes whole pages,
  // must never cover part of a slot (nor a slot be made inside pages the
  // caller locked), or the ranges here would overlap.
  const std::size_t rounded = std::max(page, (bytes + page - 1) / page * page);
  auto* data = static_cast<std::byte*>(std::aligned_alloc(page, rounded));
  if (!data) throw std::bad_alloc();
  ranges_[data] = {bytes, kind};
  if (kind == MemoryKind::device) device_used_ += bytes;
  return data;
}

void HostDevice::free(std::byte* data) {
  if (!data) return;
  {
    std::lock_guard lock(mutex_);
    const auto it = ranges_.find(data);
    if (it != ranges_.end()) {
      if (it->second.kind == MemoryKind::device) device_used_ -= it->second.bytes;
      ranges_.erase(it);
    }
  }
  std::free(data);
}

std::map<const std::byte*, HostDevice::Range>::const_iterator HostDevice::find(const std::byte* p) const {
  auto it = ranges_.upper_bound(p);
  if (it == ranges_.begin()) return ranges_.end();
  --it;
  return p < it->first + it->second.bytes ? it : ranges_.end();
}

const void* HostDevice::lock(const void* data, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  const auto address = reinterpret_cast<std::uintptr_t>(data);
  auto begin = address / page * page, end = (address + bytes + page - 1) / page * page;
  auto locked = [&](std::uintptr_t at) { return find(reinterpret_cast<const std::byte*>(at)) != ranges_.end(); };
  while (begin < end && locked(begin)) begin += page;
  while (end > begin && locked(end - page)) end -= page;
  if (begin == end) return nullptr;
  for (std::uintptr_t at = begin; at < end; at += page)
    if (locked(at)) throw HostExecutorError("host executor: part of the range is page-locked already");
  const auto* start = reinterpret_cast<const std::byte*>(begin);
  ranges_[start] = {end - begin, MemoryKind::registered};
  return start;
}

void HostDevice::unlock(const void* start) {
  if (!start) return;
  std::lock_guard lock(mutex_);
  ranges_.erase(static_cast<const std::byte*>(start));
}

// As memory_extents() on a GPU: cut where page-locked ranges begin and end,
// stopping at the first byte that is not page-locked host memory.
std::vector<MemoryExtent> HostDevice::extents(const void* data, std::size_t bytes) const {
  std::lock_guard lock(mutex_);
  std::vector<MemoryExtent> out;
  const auto* begin = static_cast<const std::byte*>(data);
  for (const std::byte* p = begin; p < begin + bytes;) {
    const std::size_t offset = static_cast<std::size_t>(p - begin);
    const auto it = find(p);
    if (it == ranges_.end() || !is_page_locked_host(it->second.kind)) {
      out.push_back({offset, bytes - offset, it == ranges_.end() ? MemoryKind::pageable : it->second.kind});
      break;
    }
    const std::byte* stop = std::min(begin + bytes, it->first + it->second.bytes);
    out.push_back({offset, static_cast<std::size_t>(stop - p), it->second.kind});
    p = stop;
  }
  return out;
}

std::size_t HostDevice::free_device_bytes() const {
  std::lock_guard lock(mutex_);
  return options_.device_bytes - device_used_;
}

std::optional<InjectedFault> HostDevice::take_fault(OpRef at, InjectedFault::Kind kind) {
  std::lock_guard lock(mutex_);
  const auto it = std::find_if(faults_.begin(), faults_.end(),
                               [&](const InjectedFault& f) { return f.kind == kind && f.at == at; });
  if (it == faults_.end()) return std::nullopt;
  const InjectedFault fault = *it;
  faults_.erase(it);
  return fault;
}

bool HostDevice::take_fault(InjectedFault::Kind kind) {
  std::lock_guard lock(mutex_);
  const auto it =
      std::find_if(faults_.begin(), faults_.end(), [kind](const InjectedFault& f) { return f.kind == kind; });
  if (it == faults_.end()) return false;
  faults_.erase(it);
  return true;
}

void HostDevice::add_fault(InjectedFault fault) {
  std::lock_guard lock(mutex_);
  faults_.push_back(fault);
}

void HostDevice::clear_faults() {
  std::lock_guard lock(mutex_);
  faults_.clear();
}

void HostDevice::set_edge_filter(EdgeFilter keep) {
  std::lock_guard lock(mutex_);
  keep_ = std::move(keep);
}

bool HostDevice::keeps(const Op& op, const Edge& edge) const {
  std::lock_guard lock(mutex_);
  return !keep_ || keep_(op, edge);
}

void HostDevice::violation(std::string what) {
  std::lock_guard lock(mutex_);
  violations_.push_back(std::move(what));
}

std::vector<std::string> HostDevice::violations() const {
  std::lock_guard lock(mutex_);
  return violations_;
}

HostExecutor::Holdings HostDevice::holdings() const {
  std::lock_guard lock(mutex_);
  HostExecutor::Holdings h;
  for (const auto& [start, range] : ranges_) {
    if (range.kind == MemoryKind::device) h.device_bytes += range.bytes;
    if (range.kind == MemoryKind::pinned) h.pinned_bytes += range.bytes;
    if (range.kind == MemoryKind::registered) ++h.locked_ranges;
  }
  h.lane_threads = lane_threads_.load();
  return h;
}

std::optional<EngineRates> HostDevice::rates() {
  if (take_fault(InjectedFault::Kind::rates))
    throw HostExecutorError("host executor: an injected failure measuring the engines' rates (out of device memory)");
  return std::nullopt;
}

bool HostDevice::within(const void* data, std::size_t bytes, bool device) const {
  std::lock_guard lock(mutex_);
  const auto* p = static_cast<const std::byte*>(data);
  const auto it = find(p);
  if (it == ranges_.end() || p + bytes > it->first + it->second.bytes) return false;
  return device ? it->second.kind == MemoryKind::device : is_page_locked_host(it->second.kind);
}

}  // namespace sluice::detail

// ---------------------------------------------------------------------------
// The public handle.

namespace sluice {

HostExecutor::HostExecutor(HostExecutorOptions options) : device_(std::make_shared<detail::HostDevice>(options)) {}

HostExecutor::Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }
HostExecutor::Buffer& HostExecutor::Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    if (device_) device_->free(data_);
    device_ = std::move(other.device_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}
HostExecutor::Buffer::~Buffer() {
  if (device_) device_->free(data_);
}

HostExecutor::Buffer HostExecutor::allocate_pinned(std::size_t bytes) {
  Buffer b;
  b.device_ = device_;
  b.data_ = device_->allocate(bytes, MemoryKind::pinned);
  b.bytes_ = bytes;
  return b;
}

HostExecutor::Registration::Registration(Registration&& other) noexcept { *this = std::move(other); }
HostExecutor::Registration& HostExecutor::Registration::operator=(Registration&& other) noexcept {
  if (this != &other) {
    if (device_) device_->unlock(data_);
    device_ = std::move(other.device_);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}
HostExecutor::Registration::~Registration() {
  if (device_) device_->unlock(data_);
}

HostExecutor::Registration HostExecutor::register_memory(const void* data, std::size_t bytes) {
  if (!data || bytes == 0) throw std::invalid_argument("register_memory: null pointer or zero bytes");
  Registration r;
  r.device_ = device_;
  r.data_ = device_->lock(data, bytes);
  return r;
}

void HostExecutor::inject(InjectedFault fault) { device_->add_fault(fault); }
void HostExecutor::clear_faults() { device_->clear_faults(); }
void HostExecutor::ignore_edges(EdgeFilter keep) { device_->set_edge_filter(std::move(keep)); }
HostExecutor::Holdings HostExecutor::holdings() const { return device_->holdings(); }

bool HostExecutor::page_locked(const void* at) const {
  return is_page_locked_host(device_->extents(at, 1).front().kind);
}
std::vector<std::string> HostExecutor::violations() const { return device_->violations(); }
std::size_t HostExecutor::operations_checked() const { return device_->checked(); }

}  // namespace sluice
