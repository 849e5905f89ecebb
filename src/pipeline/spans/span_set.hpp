#pragma once
// A pipeline's spans: what each is, checks before any work, and how each
// one's bytes travel this run (HostMemoryPolicy). Host-only.
//
// Memory the caller lends (a std::vector, a span) is never left page-locked
// after a run: the caller may free it the moment run() returns, and memory
// the driver still calls page-locked would make every later copy from those
// addresses, sluice's or anyone's, read the old pages. Page-locking that
// outlives a run is only done to memory whose owner the pipeline holds (a
// Python array), or by the caller, who holds the registration
// (sluice::HostRegistration) and so decides its lifetime.
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/staging_pool.hpp"
#include "pipeline/executors/executor.hpp"
#include "sluice/pipeline/pipeline_options.hpp"
#include "sluice/pipeline/schedule.hpp"
#include "sluice/pipeline/source.hpp"

namespace sluice::detail {

// Page-locking of one span, possibly done on a background thread between runs.
//
// Only the whole pages inside the span are locked. Page-locking takes whole
// pages, and the first and last pages of memory that is not page-aligned
// (any array from malloc) hold other memory too: locked with the span, they
// make the driver take that memory for page-locked, and a copy of it that
// runs past the locked range (PyTorch's own copy of a fresh array placed
// there) is refused. The sub-page bytes at either end, head [0, head) and
// tail [bytes - tail, bytes), travel through a small pinned buffer of the
// lock's own instead: the run fills it from the span before its first copy
// in, and empties it into the span as each chunk's copy out lands.
class SpanLock {
 public:
  SpanLock() = default;
  ~SpanLock();  // waits for a background lock, then unlocks
  SpanLock(const SpanLock&) = delete;
  SpanLock& operator=(const SpanLock&) = delete;

  // The pinned buffer for the span's sub-page ends (lock_now makes it if this was not called).
  void make_edges(Executor& executor, void* data, std::size_t bytes);
  // Locks now. Throws when the executor refuses.
  void lock_now(Executor& executor, void* data, std::size_t bytes, bool read_only);
  // Once complete(): the span's sub-page ends, and where each byte of them is in the pinned buffer.
  std::size_t head() const { return head_; }
  std::size_t tail() const { return tail_; }
  std::byte* edge(std::size_t offset, std::size_t span_bytes) const {
    return edges_.data() + (offset < head_ ? offset : head_ + offset - (span_bytes - tail_));
  }
  const void* edge_buffer() const { return edges_.data(); }
  // Locks now; a failure is kept (failure()), not thrown. True when locked.
  bool try_lock_now(Executor& executor, void* data, std::size_t bytes, bool read_only);
  // Queues try_lock_now on `registrar` (one thread).
  void lock_in_background(Executor& executor, StagingPool& registrar, void* data, std::size_t bytes, bool read_only);
  // Until a background lock has finished (successfully or not).
  void wait() const;
  bool complete() const { return complete_.load(); }
  std::string failure() const;

 private:
  std::unique_ptr<HostLock> lock_;
  SlotMemory edges_;  // pinned: the head's bytes, then the tail's
  std::size_t head_ = 0, tail_ = 0;
  bool edges_made_ = false;
  StagingPool::Ticket background_;
  std::atomic<bool> complete_{false};
  mutable std::mutex mutex_;
  std::string failure_;
};

struct SpanRecord {
  SpanRole role = SpanRole::input;
  std::size_t item_bytes = 0;
  std::size_t items = 0;
  std::byte* host = nullptr;       // host memory spans
  std::shared_ptr<Source> source;  // or a source (inputs)
  std::shared_ptr<Sink> sink;      // or a sink (outputs)
  // The memory's owner, held by the pipeline (a language binding's array):
  // only such memory may stay page-locked between runs.
  std::shared_ptr<const void> owner;

  // Decided per run (SpanSet::classify):
  HostPath path = HostPath::direct;
  // direct: where copies must be cut, from head() to bytes() - tail() (the
  // ends between go through own_lock()'s pinned buffer)
  std::vector<MemoryExtent> extents;
  std::unique_ptr<SpanLock> kept_lock;  // automatic, owned memory: kept until rebind or clear
  std::unique_ptr<SpanLock> run_lock;   // register_memory: this run only
  bool lock_after_run = false;          // automatic, owned memory: staged this run, locked once it ends

  // The page-locking sluice holds for this span now (this run's, or the one
  // kept between runs), whose pinned buffer stands in for the span's
  // sub-page ends; null when the memory was page-locked by its owner.
  const SpanLock* own_lock() const {
    if (run_lock && run_lock->complete()) return run_lock.get();
    return kept_lock && kept_lock->complete() ? kept_lock.get() : nullptr;
  }
  std::size_t head() const {
    const SpanLock* lock = own_lock();
    return lock ? lock->head() : 0;
  }
  std::size_t tail() const {
    const SpanLock* lock = own_lock();
    return lock ? lock->tail() : 0;
  }
  // A direct span some of whose bytes go through its own lock's buffer.
  bool through_edges() const { return path == HostPath::direct && head() + tail() > 0; }
  bool copied_in() const { return role != SpanRole::output; }
  bool copied_out() const { return role != SpanRole::input; }
  bool host_pass() const { return path != HostPath::direct; }
  std::size_t bytes() const { return items * item_bytes; }
  std::byte* at(std::size_t item) const { return host + item * item_bytes; }
  SpanShape shape() const { return {role, path, item_bytes}; }
  std::string describe(std::size_t index) const;
};

class SpanSet {
 public:
  std::size_t add(SpanRecord span);
  // Points a host span at other memory; its locks go (they were for the old memory).
  void rebind(std::size_t index, const void* data, std::size_t items, bool writable);
  void clear() { spans_.clear(); }

  std::size_t size() const { return spans_.size(); }
  bool empty() const { return spans_.empty(); }
  SpanRecord& operator[](std::size_t k) { return spans_[k]; }
  const SpanRecord& operator[](std::size_t k) const { return spans_[k]; }
  auto begin() { return spans_.begin(); }
  auto end() { return spans_.end(); }
  auto begin() const { return spans_.begin(); }
  auto end() const { return spans_.end(); }
  std::size_t item_count() const { return spans_.empty() ? 0 : spans_.front().items; }

  // Throws std::invalid_argument before any work: no spans, mismatched item
  // counts, null memory, overlapping spans where one is written.
  void validate() const;
  // Decides each span's path for this run; says in `notes` what it decided on
  // its own. `replayed`: the run is replayed, so memory the pipeline owns is
  // page-locked now rather than staged first.
  std::vector<SpanShape> classify(HostMemoryPolicy policy, Executor& executor, std::vector<std::string>& notes,
                                  bool replayed = false);
  // After a run: register_memory's locks end; automatic locks owned memory
  // that this run staged, in the background, for the next run.
  void after_run(bool succeeded, Executor& executor, StagingPool& registrar);

 private:
  std::vector<SpanRecord> spans_;
};

}  // namespace sluice::detail
