#include "ring/cuda_ring_executor.hpp"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "core/made_on.hpp"
#include "loader/pinned_slots.hpp"
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
// of the stream that used it last, once no one holds it.
struct DeviceBlock {
  DeviceBlock(int on_device, std::size_t size, cudaStream_t on) : device(on_device), bytes(size), free_on(on) {
    const DeviceScope scope(device);
    SLUICE_CUDA_CHECK(cudaMallocAsync(&data, bytes, on));
  }
  ~DeviceBlock() {
    // Freed in a forked child (a DataLoader's worker collecting the parent's
    // objects): the CUDA context is not the child's to touch.
    if (getpid() != made_in) return;
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

}  // namespace

struct CudaRingExecutor::Slots {
  explicit Slots(int on_device) : copy(detail::made_on<Stream>(on_device)) {}
  std::optional<RingPlan> plan;
  Stream copy;
  std::vector<std::shared_ptr<DeviceBlock>> device;
  std::vector<PinnedBuffer<std::byte>> staging;
  std::vector<Event> ready, released, copied;  // ready/released per device slot, copied per staging slot
  std::vector<std::size_t> ready_position;     // the position whose ready a device slot's event holds
  std::vector<bool> released_once;             // whether a slot's released event was recorded
};

CudaRingExecutor::CudaRingExecutor(int device) : device_(device) {}

CudaRingExecutor::~CudaRingExecutor() { finish(); }

void CudaRingExecutor::make_slots(const RingPlan& plan) {
  std::lock_guard lock(mutex_);
  if (s_) throw std::logic_error("cuda ring executor: runs one ring at a time");
  const DeviceScope scope(device_);
  auto s = std::make_unique<Slots>(device_);
  s->plan.emplace(plan);
  for (std::size_t d = 0; d < plan.slots(); ++d) {
    s->device.push_back(std::make_shared<DeviceBlock>(device_, plan.slot_bytes(), s->copy.view().get()));
    s->ready.emplace_back();
    s->released.emplace_back();
  }
  s->ready_position.assign(plan.slots(), SIZE_MAX);
  s->released_once.assign(plan.slots(), false);
  for (std::size_t p = 0; p < plan.staging_slots(); ++p) {
    s->staging.push_back(detail::take_pinned_slot(grown(plan.slot_bytes())));
    s->copied.emplace_back(Event::Timing::disabled, Event::Wait::block);
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
  if (last_copy) {
    // The host must wait here: it is about to write what the copy reads. Not
    // under the lock, so that the consumer's take() and release() go on.
    const DeviceScope scope(device_);
    last_copy->synchronize();
  }
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

void CudaRingExecutor::copy(const RingOp& op, std::size_t bytes, const std::vector<CopyPiece>& pieces) {
  std::lock_guard lock(mutex_);
  const DeviceScope scope(device_);
  const cudaStream_t copy = s_->copy.view().get();
  for (const RingEdge& e : op)
    if (e.why == Why::device_slot && keeps(op, e) && s_->released_once.at(op.device_slot))
      s_->copy.wait(s_->released.at(op.device_slot));
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

void CudaRingExecutor::ready(const RingOp& op) {
  std::lock_guard lock(mutex_);
  const DeviceScope scope(device_);
  s_->ready.at(op.device_slot).record(s_->copy);
  s_->ready_position.at(op.device_slot) = op.ref.position;
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
  const Event& ready = s_->ready.at(op.device_slot);
  // A position already on the device needs no wait: one operation less on the step's stream.
  if (!ready.ready()) SLUICE_CUDA_CHECK(cudaStreamWaitEvent(stream_of(lane), ready.get(), 0));
  s_->device.at(op.device_slot)->free_on = stream_of(lane);
}

void CudaRingExecutor::release(const RingOp& op, ConsumerLane lane) {
  std::lock_guard lock(mutex_);
  // On the copy lane itself the next copy into the slot follows the release in the stream's own
  // order: no event to wait on (released_once stays false, so copy() waits on none).
  if (stream_of(lane) == s_->copy.view().get()) return;
  const DeviceScope scope(device_);
  SLUICE_CUDA_CHECK(cudaEventRecord(s_->released.at(op.device_slot).get(), stream_of(lane)));
  s_->released_once.at(op.device_slot) = true;
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
  const std::size_t d = s_->plan->device_slot(position);
  const std::size_t at = s_->ready_position.at(d);
  if (at == SIZE_MAX || at < position) return false;  // not enqueued yet
  const DeviceScope scope(device_);
  // A later position's ready on the same stream is later in its order.
  return s_->ready.at(d).ready();
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
