#pragma once
// The CUDA ring executor: a ring's plan (ring_plan.hpp) on a GPU. The device
// slots are device memory, the staging slots page-locked host memory kept
// across rings (loader/pinned_slots.hpp), the copy lane a copy stream, and
// `ready` and `release` events; the consumer's lane is the caller's stream
// (ConsumerLane::handle, a cudaStream_t). The host waits only where the plan
// says it must: before refilling a staging slot its last copy still reads.
//
// A device slot's memory is shared (slot_memory): a position detached by its
// consumer keeps its memory until the last holder lets go, and that memory
// is then freed in the order of the stream that took it (cudaFreeAsync), so
// work the consumer enqueued before letting go still reads it.
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "ring/ring_executor.hpp"

namespace sluice::ring {

class CudaRingExecutor final : public RingExecutor {
 public:
  explicit CudaRingExecutor(int device);
  ~CudaRingExecutor() override;
  CudaRingExecutor(const CudaRingExecutor&) = delete;
  CudaRingExecutor& operator=(const CudaRingExecutor&) = delete;

  int device() const { return device_; }

  void make_slots(const RingPlan& plan) override;
  std::byte* staging_slot(std::size_t slot) override;
  std::byte* device_slot(std::size_t slot) override;
  std::shared_ptr<void> slot_memory(std::size_t slot) override;
  void stage(const RingOp& op, std::size_t bytes, const Fill& fill) override;
  void copy(const RingOp& op, std::size_t bytes, const std::vector<CopyPiece>& pieces) override;
  void ready(const RingOp& op) override;
  void take(const RingOp& op, ConsumerLane lane) override;
  void release(const RingOp& op, ConsumerLane lane) override;
  void detach(const RingOp& op) override;
  std::optional<LaneFailure> failure() const override { return std::nullopt; }  // CUDA errors throw where they show
  void host_wait(OpRef op) override;
  bool copied(std::size_t position) const override;
  ConsumerLane copy_lane() const override;
  void finish() noexcept override;

  struct Slots;

 private:
  int device_;
  mutable std::mutex mutex_;
  std::unique_ptr<Slots> s_;
};

}  // namespace sluice::ring
