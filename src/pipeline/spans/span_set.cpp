#include "span_set.hpp"

#include <unistd.h>

#include <algorithm>
#include <stdexcept>

namespace sluice::detail {

namespace {

bool ranges_overlap(const SpanRecord& a, const SpanRecord& b) {
  if (a.host == nullptr || b.host == nullptr || a.bytes() == 0 || b.bytes() == 0) return false;
  return a.host < b.host + b.bytes() && b.host < a.host + a.bytes();
}

bool all_locked(const std::vector<MemoryExtent>& extents) {
  return std::all_of(extents.begin(), extents.end(), [](const MemoryExtent& e) { return is_page_locked_host(e.kind); });
}

std::size_t page_bytes() {
  static const std::size_t page = [] {
    const long size = sysconf(_SC_PAGESIZE);
    return size > 0 ? static_cast<std::size_t>(size) : std::size_t{4096};
  }();
  return page;
}

// A direct span's extents: where its copies are cut between head() and
// bytes() - tail(), the ends its own lock's buffer stands in for.
std::vector<MemoryExtent> direct_extents(Executor& executor, const SpanRecord& s) {
  const std::size_t head = s.head(), tail = s.tail();
  std::vector<MemoryExtent> extents;
  if (head + tail < s.bytes()) {
    extents = executor.extents(s.host + head, s.bytes() - head - tail);
    for (MemoryExtent& e : extents) e.offset += head;
  }
  return extents;
}

std::size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

}  // namespace

// ---------------------------------------------------------------------------
SpanLock::~SpanLock() {
  wait();
  std::lock_guard lock(mutex_);
  lock_.reset();
}

void SpanLock::make_edges(Executor& executor, void* data, std::size_t bytes) {
  const auto at = reinterpret_cast<std::uintptr_t>(data);
  std::size_t head = std::min(bytes, (page_bytes() - at % page_bytes()) % page_bytes());
  std::size_t tail = (at + bytes) % page_bytes();
  if (head + tail >= bytes) {  // no whole page inside: the buffer stands in for all of it
    head = bytes;
    tail = 0;
  }
  SlotMemory edges;
  if (head + tail > 0) edges = executor.allocate_pinned(head + tail);
  std::lock_guard lock(mutex_);
  edges_ = std::move(edges);
  head_ = head;
  tail_ = tail;
  edges_made_ = true;
}

void SpanLock::lock_now(Executor& executor, void* data, std::size_t bytes, bool read_only) {
  if (!edges_made_) make_edges(executor, data, bytes);
  std::unique_ptr<HostLock> locked;
  if (head_ + tail_ < bytes) locked = executor.lock(static_cast<std::byte*>(data) + head_, bytes - head_ - tail_, read_only);
  std::lock_guard lock(mutex_);
  lock_ = std::move(locked);
  complete_ = true;
}

void SpanLock::lock_in_background(Executor& executor, StagingPool& registrar, void* data, std::size_t bytes,
                                  bool read_only) {
  // Locking while a run is in flight would hold up every CUDA call of the
  // run (the driver serializes them): it happens between runs, and a run that
  // starts while it is still going waits for it.
  background_ = registrar.submit(1, 1, [this, &executor, data, bytes, read_only](std::size_t, std::size_t) {
    try_lock_now(executor, data, bytes, read_only);
  });
}

bool SpanLock::try_lock_now(Executor& executor, void* data, std::size_t bytes, bool read_only) {
  try {
    lock_now(executor, data, bytes, read_only);
    return true;
  } catch (const std::exception& e) {
    std::lock_guard lock(mutex_);
    failure_ = e.what();
    return false;
  }
}

void SpanLock::wait() const {
  if (background_) background_->wait();  // its piece catches everything: this never throws
}

std::string SpanLock::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

// ---------------------------------------------------------------------------
std::string SpanRecord::describe(std::size_t index) const {
  std::string role_name = role == SpanRole::input ? "input" : role == SpanRole::output ? "output" : "inout";
  std::string text = "span " + std::to_string(index) + " (" + role_name;
  if (source) text += ", " + source->name();
  if (sink) text += ", " + sink->name();
  return text + ")";
}

std::size_t SpanSet::add(SpanRecord span) {
  if (span.item_bytes == 0) throw std::invalid_argument("span items must be at least 1 byte");
  spans_.push_back(std::move(span));
  return spans_.size() - 1;
}

void SpanSet::rebind(std::size_t index, const void* data, std::size_t items, bool writable) {
  SpanRecord& span = spans_.at(index);
  if (span.source || span.sink) throw std::logic_error("rebind(): " + span.describe(index) + " is not host memory");
  if (span.copied_out() && !writable) throw std::logic_error("rebind(): " + span.describe(index) + " needs writable memory");
  span.kept_lock.reset();  // the old memory is no longer the pipeline's to keep locked
  span.run_lock.reset();
  span.owner.reset();
  span.host = static_cast<std::byte*>(const_cast<void*>(data));
  span.items = items;
}

void SpanSet::validate() const {
  if (spans_.empty()) throw std::invalid_argument("pipeline has no spans: add at least one input or output");
  const std::size_t items = spans_.front().items;
  for (std::size_t k = 0; k < spans_.size(); ++k) {
    const SpanRecord& s = spans_[k];
    if (s.items != items)
      throw std::invalid_argument(s.describe(k) + " has " + std::to_string(s.items) + " items but span 0 has " +
                                  std::to_string(items) + ": all spans must match");
    if (!s.source && !s.sink && s.host == nullptr && s.items > 0) throw std::invalid_argument(s.describe(k) + " is null");
  }
  for (std::size_t i = 0; i < spans_.size(); ++i)
    for (std::size_t j = i + 1; j < spans_.size(); ++j) {
      const bool either_written = spans_[i].copied_out() || spans_[j].copied_out();
      if (either_written && ranges_overlap(spans_[i], spans_[j]))
        throw std::invalid_argument("spans " + std::to_string(i) + " and " + std::to_string(j) +
                                    " overlap and one is written: use inout() for an in-place transform");
    }
}

std::vector<SpanShape> SpanSet::classify(HostMemoryPolicy policy, Executor& executor, std::vector<std::string>& notes,
                                         bool replayed) {
  std::vector<SpanShape> shapes;
  for (std::size_t k = 0; k < spans_.size(); ++k) {
    SpanRecord& s = spans_[k];
    s.extents.clear();
    s.lock_after_run = false;
    if (s.source || s.sink || s.bytes() == 0) {
      s.path = s.source ? HostPath::source : s.sink ? HostPath::sink : HostPath::direct;
      shapes.push_back(s.shape());
      continue;
    }
    if (s.kept_lock) s.kept_lock->wait();  // a background lock from the last run
    s.extents = executor.extents(s.host, s.bytes());
    const MemoryKind first = s.extents.front().kind;
    if (first == MemoryKind::device || first == MemoryKind::managed)
      throw std::invalid_argument(s.describe(k) + " is " + std::string(to_string(first)) +
                                  " memory: the pipeline streams host memory");
    const bool ours = s.kept_lock && s.kept_lock->complete();
    s.path = HostPath::direct;
    if (!all_locked(s.extents) || ours) {
      const bool read_only = s.role == SpanRole::input;
      switch (policy) {
        case HostMemoryPolicy::stage: s.path = HostPath::staged; break;
        case HostMemoryPolicy::register_memory:
          s.run_lock = std::make_unique<SpanLock>();
          try {
            s.run_lock->make_edges(executor, s.host, s.bytes());
          } catch (...) {
            s.run_lock.reset();
            throw;  // a failed allocation is said as it is
          }
          try {
            s.run_lock->lock_now(executor, s.host, s.bytes(), read_only);
          } catch (const std::exception& e) {
            s.run_lock.reset();
            throw std::invalid_argument(s.describe(k) + " cannot be page-locked (HostMemoryPolicy::register_memory): " +
                                        e.what());
          }
          break;
        case HostMemoryPolicy::automatic:
          if (ours) break;
          s.path = HostPath::staged;
          if (!s.owner) {
            notes.push_back(s.describe(k) +
                            " was staged: memory the caller lends is never page-locked behind its back (a "
                            "sluice::HostRegistration the caller holds has it copied directly)");
          } else if (s.kept_lock) {
            notes.push_back(s.describe(k) + " stays staged: page-locking it failed: " + s.kept_lock->failure());
          } else if (const std::size_t limit = physical_memory_bytes() / 4; limit > 0 && s.bytes() > limit) {
            notes.push_back(s.describe(k) + " stays staged: it is larger than a quarter of physical memory");
          } else if (replayed) {
            // A replayed run copies directly or not at all: lock it now, and keep it locked.
            // A failure is kept with the lock: later runs say it too.
            s.kept_lock = std::make_unique<SpanLock>();
            if (s.kept_lock->try_lock_now(executor, s.host, s.bytes(), read_only))
              s.path = HostPath::direct;
            else
              notes.push_back(s.describe(k) + " stays staged: page-locking it failed: " + s.kept_lock->failure());
          } else {
            s.lock_after_run = true;
          }
          break;
      }
      if (s.path == HostPath::direct) {
        // A neighbour's lock that this span leaned on may have gone (rebind): stage what is not locked.
        s.extents = direct_extents(executor, s);
        if (!all_locked(s.extents)) s.path = HostPath::staged;
      }
    }
    shapes.push_back(s.shape());
  }
  return shapes;
}

void SpanSet::after_run(bool succeeded, Executor& executor, StagingPool& registrar) {
  for (SpanRecord& s : spans_) {
    s.run_lock.reset();
    if (succeeded && s.lock_after_run && !s.kept_lock) {
      s.kept_lock = std::make_unique<SpanLock>();
      s.kept_lock->lock_in_background(executor, registrar, s.host, s.bytes(), s.role == SpanRole::input);
    }
    s.lock_after_run = false;
  }
}

}  // namespace sluice::detail
