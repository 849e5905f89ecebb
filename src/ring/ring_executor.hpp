#pragma once
// What a ring's engine asks of the machine it runs on, one call per operation
// of the plan (ring_plan.hpp). Host-only: no CUDA header, so that the engine
// (ring.hpp) is the same code on a GPU and on the host executor.
//
// On a GPU: the slots are cudaMalloc'd device memory and cudaMallocHost'd
// staging memory; the copy lane is a copy stream; `ready` and `release` are
// events; the consumer's lane is the caller's stream. On the host executor
// (host_ring_executor.hpp) every lane is a thread over host memory, and every
// operation checks its edges as it starts.
//
// Calls come from two threads: the producer (stage, copy, ready) and the
// consumer (take, release, failure), and make/finish from whoever owns the
// ring. To the host (RingOptions::direction), the caller's thread marks,
// copies and readies, and the ring's drainer drains.
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <vector>
#include <span>
#include <string>

#include "ring/ring_plan.hpp"

namespace sluice::ring {

// Where the consumer's work runs: a cudaStream_t on a GPU; the host executor
// has a consumer lane of its own and ignores it. Opaque here so that this
// header stays host-only.
struct ConsumerLane {
  void* handle = nullptr;
};

// An operation that failed on a lane (a copy the device refused): the first one.
struct LaneFailure {
  OpRef at;
  std::string what;
};

// A piece of a position's copy: `bytes` from `from` (page-locked memory the
// caller keeps until the copy is done), or from the staging slot where
// `from` is null, to the same `offset` in the device slot; or, where `to` is
// set, to the caller's device memory there instead of the slot (a checkpoint
// read into the tensors' own memory: no second copy out of a slot). The
// caller keeps `to` until the consumer's lane has taken the position.
//
// To the host: `bytes` from `from`, the caller's device memory (kept until
// the position is copied), to the same `offset` in the staging slot; or,
// where `to` is set, to the caller's page-locked memory there.
struct CopyPiece {
  const std::byte* from = nullptr;
  std::size_t offset = 0;
  std::size_t bytes = 0;
  std::byte* to = nullptr;
};

// How long the consumer's lane waited for positions (RingOptions::timed).
// The first position taken is the fill (the ring starting up), apart; the
// loop runs from taking the second position to taking the last.
struct IdleTimes {
  std::size_t taken = 0;  // positions taken
  double fill_ms = 0;     // the wait for the first
  double waited_ms = 0;   // the waits for every later one, summed
  double loop_ms = 0;     // the second taken to the last, on the consumer's lane
};

// A position's transform (RingOptions::out_bytes), on the copy lane after its
// copy: `lane` is the copy lane's handle (a cudaStream_t on a GPU, to launch
// on; null on the host executor, which runs it on its copy lane's thread),
// `raw` the bytes the copy wrote into the device slot, `out` the slot's output.
using Transform = std::function<void(void* lane, std::span<const std::byte> raw, std::span<std::byte> out)>;

class RingExecutor {
 public:
  virtual ~RingExecutor() = default;

  // The plan's slots and lanes, before any operation. Throws on failure (no memory).
  virtual void make_slots(const RingPlan& plan) = 0;
  virtual std::byte* staging_slot(std::size_t slot) = 0;
  virtual std::byte* device_slot(std::size_t slot) = 0;
  // The device slot's memory as it is now, shared: whoever holds it keeps it
  // alive after the slot is given other memory (detach) or the ring ends.
  virtual std::shared_ptr<void> slot_memory(std::size_t slot) = 0;

  // Host, on the calling (producer) thread: waits for the stage's staging-slot
  // edge (the host must: it is about to write the slot), gives the slot at
  // least `bytes`, then runs `fill` over those bytes on the staging threads
  // and returns once it is done. Throws what `fill` throws, or the failure of
  // the copy it waited on.
  using Fill = std::function<void(std::span<std::byte> slot)>;
  virtual void stage(const RingOp& op, std::size_t bytes, const Fill& fill) = 0;
  // Copy lane, returning at once: after the op's edges, gives the device slot
  // at least `bytes` (new memory where it is smaller) and copies the pieces
  // into it; the ring has checked that every piece lies within `bytes`.
  // To the host: after the position's mark, gives the staging slot at least
  // `bytes` and copies the pieces out of the device (the ring has waited for
  // the slot's last drain: a host operation, which no lane can wait on).
  virtual void copy(const RingOp& op, std::size_t bytes, const std::vector<CopyPiece>& pieces) = 0;
  // Copy lane, returning at once: after the copy of `op`'s position, makes
  // its output from its first `bytes` in the device slot (a plan with a transform).
  virtual void transform(const RingOp& op, std::size_t bytes, const Transform& fn) = 0;
  // Copy lane: the position is on the device once the lane gets here.
  virtual void ready(const RingOp& op) = 0;
  // Consumer lane, returning at once: the lane waits for the position's ready.
  virtual void take(const RingOp& op, ConsumerLane lane) = 0;
  // Consumer lane, returning at once: the consumer's work so far is done with the slot.
  virtual void release(const RingOp& op, ConsumerLane lane) = 0;
  // Both at the same point of the consumer's lane (held 1: the release of
  // i-1 as i is taken). An executor whose release and take each mark the
  // lane may mark it once for both: on a GPU, one event per position on the
  // consumer's stream, which at a 0.2 ms step shows as idle.
  virtual void release_and_take(const RingOp& release_op, const RingOp& take_op, ConsumerLane lane) {
    release(release_op, lane);
    take(take_op, lane);
  }
  // To the host, the caller's lane, returning at once: the position's device
  // bytes are made once the lane gets here (the copy waits for it).
  virtual void mark(const RingOp& op, ConsumerLane lane) = 0;
  // To the host, on the calling (drainer) thread: waits for the drain's edges
  // (its ready: the host must, it is about to read what the copy wrote), then
  // runs `drain` over the staging slot's first `bytes` (none where the copy
  // wrote the caller's memory) and returns once it is done. Throws what
  // `drain` throws, or the failure of the copy it waited on.
  using Drain = std::function<void(std::span<const std::byte> staged)>;
  virtual void drain(const RingOp& op, std::size_t bytes, const Drain& drain) = 0;

  // Consumer, before the release `op`: the position's memory stays with
  // whoever holds it (slot_memory), and the slot gets new memory, so that
  // no later copy writes what the holder still reads.
  virtual void detach(const RingOp& op) = 0;

  // The first operation that failed on a lane, if any (no wait).
  virtual std::optional<LaneFailure> failure() const = 0;
  // The host waits until `op` has run (or failed). Where the host must: the ring's end.
  virtual void host_wait(OpRef op) = 0;
  // Whether the copy of `position`, the last ready of which was enqueued at
  // most slots positions ago, has run (no wait): its sources may be let go.
  virtual bool copied(std::size_t position) const = 0;
  // The copy lane as a consumer's lane, once make_slots has run: for a
  // consumer that reads nothing on a lane of its own and only needs each
  // position done before the host's last wait (a file read into the caller's
  // memory). Its take and release then order nothing but the copy lane itself,
  // so that several rings on one thread each do not wait on each other
  // through one shared consumer's stream. The host executor ignores lanes: {}.
  virtual ConsumerLane copy_lane() const { return {}; }
  // The consumer lane's waits so far, for a timed plan; zeros where the
  // executor cannot tell (`taken` is counted all the same).
  virtual IdleTimes idle() const = 0;
  // Whether the engine waits on this edge (every edge, except on a test
  // executor told to leave some out, to show what each one guards).
  virtual bool keeps(const RingOp&, const RingEdge&) const { return true; }

  // Nothing the ring enqueued is left pending or running once this returns;
  // the slots and lanes are gone. Never throws.
  virtual void finish() noexcept = 0;
};

}  // namespace sluice::ring
