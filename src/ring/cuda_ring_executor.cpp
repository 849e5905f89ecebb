#include "ring/cuda_ring_executor.hpp"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "core/event_poll.hpp"
#include "core/made_on.hpp"
#include "ring/pinned_slots.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/event.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"

namespace sluice::ring {

namespace {

// Staging slots grow in whole MiB, so that batches a little larger each time
// do not page-lock anew each time.
constexpr std::size_t grain = std::size_t{1} << 20;
std::size_t grown(std::size_t bytes) { return (bytes + grain - 1) / grain * grain; }

cudaStream_t stream_of(ConsumerLane lane) { return static_cast<cudaStream_t>(lane.handle); }

// Device memory of one slot, or of a detached position: freed in the order
// of the stream that used it last, once no one holds it. None for a slot of
// 0 bytes (a file read's lanes, whose chunks go to the caller's memory):
// with each lane allocating 4 slots it never used, a checkpoint load's lanes
// were ready 1.34-1.52 ms after the read's start; without, 0.25-0.80 ms (on
// another machine: not an A/B).
struct DeviceBlock {
  DeviceBlock(int on_device, std::size_t size, cudaStream_t on) : device(on_device), bytes(size), free_on(on) {
    if (bytes == 0) return;
    const DeviceScope scope(device);
    SLUICE_CUDA_CHECK(cudaMallocAsync(&data, bytes, on));
  }
  ~DeviceBlock() {
    // Freed in a forked child (a DataLoader's worker collecting the parent's
    // objects): the CUDA context is not the child's to touch.
    if (!data || getpid() != made_in) return;
    const DeviceScope scope(device);
    // The stream that took it may be gone (the caller's, destroyed): then
    // the free waits for the device instead.
    if (cudaFreeAsync(data, free_on) != cudaSuccess) {
      (void)cudaGetLastError();
      (void)cudaFree(data);
      (void)cudaGetLastError();
    }
  }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;

  pid_t made_in = getpid();
  int device;
  std::size_t bytes;
  void* data = nullptr;
  cudaStream_t free_on;  // the copy stream, then the stream of the last take
};

// An event made where it is first recorded: a ring has many marks, most of
// which a short ring never records (a timed ring's taken marks, the release
// events of a copy lane that is its own consumer), and a file read starts a
// dozen rings at once, each of which made 35 events before its first read.
class LazyEvent {
 public:
  explicit LazyEvent(Event::Timing timing = Event::Timing::disabled, Event::Wait wait = Event::Wait::spin)
      : timing_(timing), wait_(wait) {}
  Event& made() {
    if (!event_) event_.emplace(timing_, wait_);
    return *event_;
  }
  // The event once made; before then nothing may wait on it or read it.
  const Event& get() const {
    if (!event_) throw std::logic_error("cuda ring executor: an event read before it was ever recorded");
    return *event_;
  }

 private:
  Event::Timing timing_;
  Event::Wait wait_;
  std::optional<Event> event_;
};

// A position's marks: `ready` on the copy stream, `taken` on the consumer's
// (a timed plan), at position % marks; to the host, `made` on the caller's
// stream, and `ready` is what a drain waits on (asleep in the driver, if it sleeps).
struct Marks {
  Marks(Event::Timing timing, Event::Wait ready_wait) : ready(timing, ready_wait), taken(timing) {}
  LazyEvent ready, taken, made;
  std::size_t ready_position = SIZE_MAX;  // the position whose ready `ready` holds
};

}  // namespace

struct CudaRingExecutor::Slots {
  Slots(int on_device, int priority) : copy(detail::made_on<Stream>(on_device, priority)) {}
  std::optional<RingPlan> plan;
  Stream copy;
  std::vector<std::shared_ptr<DeviceBlock>> device;
  std::vector<PinnedBuffer<std::byte>> staging;
  std::vector<LazyEvent> released;         // per device slot: where the consumer's lane let it go
  std::vector<Event> copied;               // per staging slot: after its last copy
  std::vector<const Event*> released_at;   // per device slot: the event of its last release (its own, or a take's mark)
  std::vector<Marks> marks;                // per position, in a ring far longer than the slots
  Event loop_start{Event::Timing::enabled};  // a timed plan: where the second position was taken
  std::size_t taken = 0;                   // positions taken
  // The sums of a timed plan's waits (under idle_mutex_).
  std::size_t harvested = 0;  // positions from the start whose wait is summed
  double fill_ms = 0, waited_ms = 0;
  const Marks& mark(std::size_t position) const { return marks[position % marks.size()]; }
  Marks& mark(std::size_t position) { return marks[position % marks.size()]; }
};

namespace {
// Longer than the positions in flight (a ready is recorded again only long
// after its take); a timed plan's are summed lazily, so it keeps many.
std::size_t mark_count(const RingPlan& plan) {
  const std::size_t in_flight = 2 * (plan.slots() + plan.ahead());
  return plan.timed() ? std::max<std::size_t>(256, 2 * in_flight) : in_flight;
}
}  // namespace

CudaRingExecutor::CudaRingExecutor(int device, int copy_priority, StagingWait staging_wait)
    : device_(device), copy_priority_(copy_priority), staging_wait_(staging_wait) {}

CudaRingExecutor::~CudaRingExecutor() { finish(); }

void CudaRingExecutor::make_slots(const RingPlan& plan) {
  std::lock_guard lock(mutex_);
  if (s_) throw std::logic_error("cuda ring executor: runs one ring at a time");
  const DeviceScope scope(device_);
  auto s = std::make_unique<Slots>(device_, copy_priority_);
  s->plan.emplace(plan);
  for (std::size_t d = 0; d < plan.slots(); ++d) {
    s->device.push_back(std::make_shared<DeviceBlock>(device_, plan.device_slot_bytes(), s->copy.view().get()));
    s->released.emplace_back();
  }
  s->released_at.assign(plan.slots(), nullptr);
  const auto timing = plan.timed() ? Event::Timing::enabled : Event::Timing::disabled;
  // Only a drain waits on the host for a ready (to the device, the consumer's stream waits).
  const auto ready_wait = plan.to_host() && staging_wait_ == StagingWait::sleep ? Event::Wait::block : Event::Wait::spin;
  for (std::size_t m = mark_count(plan); m > 0; --m) s->marks.emplace_back(timing, ready_wait);
  s->harvested = plan.start();
  for (std::size_t p = 0; p < plan.staging_slots(); ++p) {
    s->staging.push_back(detail::take_pinned_slot(grown(plan.slot_bytes())));
    s->copied.emplace_back(Event::Timing::disabled, staging_wait_ == StagingWait::sleep ? Event::Wait::block : Event::Wait::spin);
  }
  s->copy.synchronize();  // the slots exist before any other stream uses them
  s_ = std::move(s);
}

std::byte* CudaRingExecutor::staging_slot(std::size_t slot) {
  std::lock_guard lock(mutex_);
  return s_->staging.at(slot).data();
}

std::byte* CudaRingExecutor::device_slot(std::size_t slot) {
  std::lock_guard lock(mutex_);
  return static_cast<std::byte*>(s_->device.at(slot)->data);
}

std::shared_ptr<void> CudaRingExecutor::slot_memory(std::size_t slot) {
  std::lock_guard lock(mutex_);
  auto block = s_->device.at(slot);
  return std::shared_ptr<void>(block, block->data);
}

void CudaRingExecutor::stage(const RingOp& op, std::size_t bytes, const Fill& fill) {
  if (!op.active) return;
  std::byte* slot = nullptr;
  const Event* last_copy = nullptr;  // made once with the slots: stays put while the ring runs
  {
    std::lock_guard lock(mutex_);
    for (const RingEdge& e : op)
      if (e.why == Why::staging_slot && keeps(op, e)) last_copy = &s_->copied.at(op.staging_slot);
  }
  // The host must wait here: it is about to write what the copy reads. Not
  // under the lock, so that the consumer's take() and release() go on.
  if (last_copy) host_wait_for(*last_copy);
  {
    std::lock_guard lock(mutex_);
    const DeviceScope scope(device_);
    auto& pinned = s_->staging.at(op.staging_slot);
    if (pinned.size() < bytes) {
      // Its last copy is done (waited above, or there was none).
      detail::give_back_pinned_slot(std::move(pinned));
      pinned = detail::take_pinned_slot(grown(bytes));
    }
    slot = pinned.data();
  }
  fill({slot, bytes});
}

void CudaRingExecutor::host_wait_for(const Event& event) const {
  const DeviceScope scope(device_);
  if (staging_wait_ == StagingWait::sleep)
    event.synchronize();
  else
    SLUICE_CUDA_CHECK(detail::poll_event(event.get(), staging_wait_ == StagingWait::nap ? detail::PollPause::sleep
                                                                                          : detail::PollPause::yield));
}

void CudaRingExecutor::mark(const RingOp& op, ConsumerLane lane) {
  std::lock_guard lock(mutex_);
  const DeviceScope scope(device_);
  SLUICE_CUDA_CHECK(cudaEventRecord(s_->mark(op.ref.position).made.made().get(), stream_of(lane)));
}

void CudaRingExecutor::copy_out(const RingOp& op, std::size_t bytes, const std::vector<CopyPiece>& pieces) {
  std::lock_guard lock(mutex_);
  const DeviceScope scope(device_);
  const cudaStream_t copy = s_->copy.view().get();
  for (const RingEdge& e : op)
    if (e.why == Why::data && keeps(op, e)) s_->copy.wait(s_->mark(op.ref.position).made.get());
  std::byte* staged = nullptr;
  if (s_->plan->staged()) {
    auto& pinned = s_->staging.at(op.staging_slot);
    // Its last drain is done: the ring waited for it before this copy.
    if (pinned.size() < bytes) {
      detail::give_back_pinned_slot(std::move(pinned));
      pinned = detail::take_pinned_slot(grown(bytes));
    }
    staged = pinned.data();
  }
  for (const CopyPiece& piece : pieces)
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(piece.to ? piece.to : staged + piece.offset, piece.from, piece.bytes,
                                      cudaMemcpyDeviceToHost, copy));
}

void CudaRingExecutor::drain(const RingOp& op, std::size_t bytes, const Drain& drain) {
  const Event* ready = nullptr;
  std::span<const std::byte> staged;
  {
    std::lock_guard lock(mutex_);
    ready = &s_->mark(op.ref.position).ready.get();  // stays put while the ring runs
    if (s_->plan->staged()) staged = {s_->staging.at(op.staging_slot).data(), bytes};
  }
  // The host must wait: it is about to read what the copy wrote. A failed
  // copy shows here (the copy stream's sticky error).
  host_wait_for(*ready);
  drain(staged);
}

void CudaRingExecutor::copy(const RingOp& op, std::size_t bytes, const std::vector<CopyPiece>& pieces) {
  if (s_->plan->to_host()) return copy_out(op, bytes, pieces);
  std::lock_guard lock(mutex_);
  const DeviceScope scope(device_);
  const cudaStream_t copy = s_->copy.view().get();
  for (const RingEdge& e : op)
    if (const Event* released = s_->released_at.at(op.device_slot); e.why == Why::device_slot && keeps(op, e) && released)
      s_->copy.wait(*released);
  auto& block = s_->device.at(op.device_slot);
  if (block->bytes < bytes) {
    // Freed on the copy stream, after its wait for the slot's release.
    block->free_on = copy;
    block = std::make_shared<DeviceBlock>(device_, bytes, copy);
  }
  auto* to = static_cast<std::byte*>(block->data);
  const std::byte* staged = s_->plan->staged() ? s_->staging.at(op.staging_slot).data() : nullptr;
  for (const CopyPiece& piece : pieces)
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(piece.to ? piece.to : to + piece.offset, piece.from ? piece.from : staged + piece.offset,
                                      piece.bytes, cudaMemcpyHostToDevice, copy));
  if (s_->plan->staged()) s_->copied.at(op.staging_slot).record(s_->copy);
}

void CudaRingExecutor::transform(const RingOp& op, std::size_t bytes, const Transform& fn) {
  if (!op.active) return;
  std::byte* slot = nullptr;
  cudaStream_t copy = nullptr;
  std::size_t out_at = 0, out_bytes = 0;
  {
    std::lock_guard lock(mutex_);
    slot = static_cast<std::byte*>(s_->device.at(op.device_slot)->data);
    copy = s_->copy.view().get();
    out_at = s_->plan->out_offset();
    out_bytes = s_->plan->device_slot_bytes() - out_at;
  }
  // On the copy stream after the copy: ready, recorded next, comes after it.
  const DeviceScope scope(device_);
  fn(copy, {slot, bytes}, {slot + out_at, out_bytes});
}

void CudaRingExecutor::ready(const RingOp& op) {
  const std::size_t p = op.ref.position;
  std::size_t marks = 0;
  bool reused = false;
  {
    std::lock_guard lock(mutex_);
    marks = s_->marks.size();
    reused = s_->plan->timed() && p >= s_->plan->start() + marks;
  }
  // Position p - marks was taken (the producer is at most `ahead` beyond
  // the consumer): its pair is summed before it is recorded again.
  if (reused) harvest(p - marks);
  std::lock_guard lock(mutex_);
  const DeviceScope scope(device_);
  Marks& mark = s_->mark(p);
  mark.ready.made().record(s_->copy);
  mark.ready_position = p;
}

const Event* CudaRingExecutor::take_locked(const RingOp& op, ConsumerLane lane, bool mark_it) {
  const std::size_t p = op.ref.position;
  Marks& mark = s_->mark(p);
  const Event* marked = nullptr;
  if (mark_it) {
    marked = &mark.taken.made();
    SLUICE_CUDA_CHECK(cudaEventRecord(marked->get(), stream_of(lane)));
    // Once: the loop proper starts after the fill.
    if (s_->taken == 1) SLUICE_CUDA_CHECK(cudaEventRecord(s_->loop_start.get(), stream_of(lane)));
  }
  // A position already on the device needs no wait: one operation less on the step's stream.
  if (!mark.ready.get().ready()) SLUICE_CUDA_CHECK(cudaStreamWaitEvent(stream_of(lane), mark.ready.get().get(), 0));
  s_->device.at(op.device_slot)->free_on = stream_of(lane);
  ++s_->taken;
  return marked;
}

ConsumerLane CudaRingExecutor::copy_lane() const {
  std::lock_guard lock(mutex_);
  return {s_ ? static_cast<void*>(s_->copy.view().get()) : nullptr};
}

void CudaRingExecutor::take(const RingOp& op, ConsumerLane lane) {
  std::lock_guard lock(mutex_);
  // The copy lane as its own consumer (copy_lane()): its ready is behind it in its own order, and
  // the slot's memory is freed there already. No API call: a file's lanes take a chunk every 2 MiB.
  if (stream_of(lane) == s_->copy.view().get()) return;
  const DeviceScope scope(device_);
  (void)take_locked(op, lane, s_->plan->timed());
}

void CudaRingExecutor::release(const RingOp& op, ConsumerLane lane) {
  std::lock_guard lock(mutex_);
  // On the copy lane itself the next copy into the slot follows the release in the stream's own
  // order: no event to wait on (released_at stays null, so copy() waits on none).
  if (stream_of(lane) == s_->copy.view().get()) return;
  const DeviceScope scope(device_);
  Event& released = s_->released.at(op.device_slot).made();
  SLUICE_CUDA_CHECK(cudaEventRecord(released.get(), stream_of(lane)));
  s_->released_at.at(op.device_slot) = &released;
}

void CudaRingExecutor::release_and_take(const RingOp& release_op, const RingOp& take_op, ConsumerLane lane) {
  std::lock_guard lock(mutex_);
  const DeviceScope scope(device_);
  // One event where the two meet: a timed plan's take mark, which the next
  // copy into the released slot waits on (it is enqueued long before the
  // mark is recorded again, marks positions later); else the slot's own.
  const Event* released = nullptr;
  if (s_->plan->timed()) {
    released = take_locked(take_op, lane, true);
  } else {
    Event& own = s_->released.at(release_op.device_slot).made();
    SLUICE_CUDA_CHECK(cudaEventRecord(own.get(), stream_of(lane)));
    released = &own;
    (void)take_locked(take_op, lane, false);
  }
  s_->released_at.at(release_op.device_slot) = released;
}

void CudaRingExecutor::harvest(std::size_t position) const {
  std::lock_guard lock(idle_mutex_);
  const DeviceScope scope(device_);
  for (; s_->harvested <= position; ++s_->harvested) {
    const Marks& mark = s_->mark(s_->harvested);
    mark.taken.get().synchronize();
    mark.ready.get().synchronize();
    // Ready before the consumer's stream got there: no wait.
    const double waited = std::max(0.0, static_cast<double>(elapsed_ms(mark.taken.get(), mark.ready.get())));
    (s_->harvested == s_->plan->start() ? s_->fill_ms : s_->waited_ms) += waited;
  }
}

IdleTimes CudaRingExecutor::idle() const {
  IdleTimes times;
  std::size_t first = 0;
  {
    std::lock_guard lock(mutex_);
    if (!s_) return times;
    times.taken = s_->taken;
    first = s_->plan->start();
    if (!s_->plan->timed() || times.taken == 0) return times;
  }
  const std::size_t last = first + times.taken - 1;
  harvest(last);
  std::lock_guard lock(idle_mutex_);
  times.fill_ms = s_->fill_ms;
  times.waited_ms = s_->waited_ms;
  if (times.taken >= 2) {
    // The loop runs from taking the second position to taking the last.
    const DeviceScope scope(device_);
    const Event& taken = s_->mark(last).taken.get();
    s_->loop_start.synchronize();
    taken.synchronize();
    times.loop_ms = static_cast<double>(elapsed_ms(s_->loop_start, taken));
  }
  return times;
}

void CudaRingExecutor::detach(const RingOp& op) {
  std::lock_guard lock(mutex_);
  auto& block = s_->device.at(op.device_slot);
  // The holder's memory is freed on the stream that took it, once let go.
  block = std::make_shared<DeviceBlock>(device_, block->bytes, s_->copy.view().get());
}

void CudaRingExecutor::host_wait(OpRef op) {
  std::lock_guard lock(mutex_);
  const DeviceScope scope(device_);
  s_->copy.synchronize();  // the copy stream's sticky error, if any, shows here
  (void)op;
}

bool CudaRingExecutor::copied(std::size_t position) const {
  std::lock_guard lock(mutex_);
  if (!s_) return true;
  const Marks& mark = s_->mark(position);
  const std::size_t at = mark.ready_position;
  if (at == SIZE_MAX || at < position) return false;  // not enqueued yet
  const DeviceScope scope(device_);
  // A later position's ready on the same stream is later in its order.
  return mark.ready.get().ready();
}

void CudaRingExecutor::finish() noexcept {
  std::lock_guard lock(mutex_);
  if (!s_) return;
  try {
    const DeviceScope scope(device_);
    s_->copy.synchronize();
    for (auto& pinned : s_->staging) detail::give_back_pinned_slot(std::move(pinned));
    s_->staging.clear();
    // Blocks no one else holds are freed here, in the order of the stream
    // that took them last; the rest when their holders let go.
    s_->device.clear();
    s_.reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: stopping a ring: %s\n", e.what());
    s_.reset();
  }
}

}  // namespace sluice::ring
