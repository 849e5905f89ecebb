#pragma once
// The CUDA ring executor: a ring's plan (ring_plan.hpp) on a GPU. The device
// slots are device memory, the staging slots page-locked host memory kept
// across rings (pinned_slots.hpp), the copy lane a copy stream, and
// `ready` and `release` events; the consumer's lane is the caller's stream
// (ConsumerLane::handle, a cudaStream_t). The host waits only where the plan
// says it must: before refilling a staging slot its last copy still reads.
//
// The consumer's stream gets as little as can be per position, since at a
// 0.2 ms step every operation on it shows as idle: the wait on `ready`, only
// where it has not happened yet, and one event where the release of i-1
// meets the take of i (held 1). A timed plan makes that event the take's
// timing mark too: `ready` and `taken` events of each position sit in a ring
// of at least 256 pairs, summed lazily (on the producer's thread before a
// pair is recorded again, or in idle()).
//
// To the host, a position's mark is an event on the caller's stream, which
// its copy (device to host, on the copy stream) waits on; its drain waits on
// the host for its ready (StagingWait) before it reads the staging slot.
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

namespace sluice {
class Event;
}

namespace sluice::ring {

// How the host waits for a staging slot's last copy before it refills the slot.
enum class StagingWait {
  sleep,  // asleep in the driver (a blocking-sync event): no CPU while it waits, wakes ~50 us late
  nap,    // asks the event, sleeping ~20 us between asks: little CPU, wakes a little late
  poll,   // asks the event, only yielding the core between asks: wakes within microseconds, keeps the core
};

// A file read's lanes (io/file_ranges.hpp) poll: each is a thread that does
// nothing else, and by default there are at most all cores but two. Read by
// read in turn, on four H100 hosts, polling lanes read a cached checkpoint
// onto the GPU about 3 % faster than sleeping ones in three pairs of four,
// and 0.4 % slower in the fourth (docs/measurements.md).
inline constexpr StagingWait file_read_staging_wait = StagingWait::poll;

class CudaRingExecutor final : public RingExecutor {
 public:
  // `copy_priority`: the copy stream's (a loader's copies run at the device's lowest).
  explicit CudaRingExecutor(int device, int copy_priority = 0, StagingWait staging_wait = StagingWait::sleep);
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
  void mark(const RingOp& op, ConsumerLane lane) override;
  void drain(const RingOp& op, std::size_t bytes, const Drain& drain) override;
  void take(const RingOp& op, ConsumerLane lane) override;
  void release(const RingOp& op, ConsumerLane lane) override;
  void release_and_take(const RingOp& release_op, const RingOp& take_op, ConsumerLane lane) override;
  void transform(const RingOp& op, std::size_t bytes, const Transform& fn) override;
  IdleTimes idle() const override;
  void detach(const RingOp& op) override;
  std::optional<LaneFailure> failure() const override { return std::nullopt; }  // CUDA errors throw where they show
  void host_wait(OpRef op) override;
  bool copied(std::size_t position) const override;
  ConsumerLane copy_lane() const override;
  void finish() noexcept override;

  struct Slots;

 private:
  // Where position p is taken: a timed plan's mark, recorded on the lane; then the wait for its ready, unless it has happened.
  // Returns the mark recorded, if any. Under mutex_.
  const Event* take_locked(const RingOp& op, ConsumerLane lane, bool mark);
  // Copies of a plan to the host: from the caller's device memory into the staging slot or its page-locked memory.
  void copy_out(const RingOp& op, std::size_t bytes, const std::vector<CopyPiece>& pieces);
  // The host waits for an event, as staging_wait_ says. Not under mutex_.
  void host_wait_for(const Event& event) const;
  // Sums the waits of the positions up to `position` (taken, and ready recorded). Under idle_mutex_, not mutex_.
  void harvest(std::size_t position) const;

  int device_;
  int copy_priority_;
  StagingWait staging_wait_;
  mutable std::mutex mutex_;
  mutable std::mutex idle_mutex_;  // the sums below; taken apart from mutex_, so that take() never waits on a harvest
  std::unique_ptr<Slots> s_;
};

}  // namespace sluice::ring
