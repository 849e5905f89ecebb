// Page-locking a pageable span in place (HostMemoryPolicy::register_memory
// and ::automatic). The span is registered as adjacent page-aligned pieces:
// several threads can register at once, and copies are cut where pieces
// meet (memory_extents), since one copy may not cross two registrations.
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

constexpr std::size_t min_piece_bytes = std::size_t{64} << 20;

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
// neighbour is registering at the same moment. With 4 KiB pages more threads
// registered no faster anyway.
std::mutex& registration_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

SpanRegistration::~SpanRegistration() { release(); }

void SpanRegistration::register_pieces(const void* data, std::size_t bytes, bool read_only, int device, unsigned threads) {
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
  const std::size_t total = end - begin;
  threads = std::max(1u, threads);
  std::size_t piece = std::max(min_piece_bytes, (total / threads + page - 1) / page * page);
  const std::size_t count = (total + piece - 1) / piece;
  const bool may_be_read_only = read_only && read_only_supported(device);

  std::vector<std::optional<HostRegistration>> done(count);
  std::vector<std::exception_ptr> errors(count);
  auto work = [&](std::size_t first, std::size_t step) {
    try {
      const DeviceScope scope(device);
      for (std::size_t i = first; i < count; i += step) {
        const std::uintptr_t at = begin + i * piece;
        const std::size_t length = std::min(piece, end - at);
        try {
          done[i].emplace(reinterpret_cast<void*>(at), length, cudaHostRegisterPortable);
        } catch (const CudaError&) {
          if (!may_be_read_only) {
            errors[i] = std::current_exception();
            continue;
          }
          try {
            done[i].emplace(reinterpret_cast<void*>(at), length, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
          } catch (...) {
            errors[i] = std::current_exception();
          }
        }
      }
    } catch (...) {
      errors[first] = std::current_exception();
    }
  };
  std::vector<std::thread> helpers;
  const std::size_t used = std::min<std::size_t>(threads, count);
  for (std::size_t t = 1; t < used; ++t) helpers.emplace_back(work, t, used);
  work(0, used);
  for (auto& h : helpers) h.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);  // the pieces that did register are released with `done`
  std::lock_guard lock(mutex_);
  for (auto& d : done) pieces_.push_back(std::move(*d));
}

void SpanRegistration::register_now(const void* data, std::size_t bytes, bool read_only, int device, unsigned threads) {
  started_ = true;
  register_pieces(data, bytes, read_only, device, threads);
  complete_ = true;
}

void SpanRegistration::register_in_background(StagingPool& registrar, const void* data, std::size_t bytes, bool read_only,
                                              int device) {
  started_ = true;
  background_ = registrar.submit(1, 1, [this, data, bytes, read_only, device](std::size_t, std::size_t) {
    try {
      // One thread: on 4 KiB pages more threads registered no faster, and the
      // staging threads need the cores while this runs.
      register_pieces(data, bytes, read_only, device, 1);
      complete_ = true;
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex_);
      failure_ = e.what();
    }
  });
}

std::string SpanRegistration::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void SpanRegistration::release() {
  if (background_) background_->wait();  // its piece catches everything: this never throws
  background_.reset();
  complete_ = false;
  std::lock_guard lock(mutex_);
  pieces_.clear();
}

}  // namespace sluice::detail
