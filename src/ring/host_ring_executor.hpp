#pragma once
// The host ring executor: a ring's plan run on host threads over host memory,
// so that the ring engine runs, and is tested, where there is no GPU.
// Host-only.
//
// Its "device" slots and staging slots are host memory; the staging threads,
// the copy lane and the consumer's lane are threads, so stages, copies and
// the consumer's work really overlap. As each operation starts it checks the
// plan: every operation it waits on has finished (for the `ahead` edge: the
// consumer has taken that position), no device slot is written while the
// position it holds is not released, and no staging slot while its copy has
// not read it. What breaks one is recorded in violations(). A transform runs
// on the copy lane, between its copy and ready. It can pause at
// random (seeded) before each operation, so that the lanes meet in different
// orders from seed to seed, inject a failure at a stage or a copy, and leave
// kinds of edges out (ignore_edges) to show what each one guards.
//
// To the host, the caller's device memory is host memory too: a mark runs
// on the consumer's lane after the caller's work there (on_consumer), the
// copy reads the caller's memory on the copy lane, and a drain runs on the
// staging thread after its ready.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ring/ring_executor.hpp"

namespace sluice::ring {

struct HostRingOptions {
  // Each operation (and each piece of the consumer's work) first waits a random 0..jitter_us microseconds.
  unsigned jitter_us = 0;
  std::uint64_t seed = 1;
};

// A failure made to happen at one operation: a stage or a drain throws as
// it starts (on the host's side, as a read or a write fails); a copy fails as
// it runs on the copy lane, and so does everything after it there (as a
// GPU's sticky error).
struct RingFault {
  OpRef at;
};

class HostRingExecutor final : public RingExecutor {
 public:
  explicit HostRingExecutor(HostRingOptions options = {});
  ~HostRingExecutor() override;

  void inject(RingFault fault);
  // The lanes, the stages' host waits and the ring's producer wait only for
  // the edges `keep` accepts; the checks still hold every operation to the whole plan.
  using EdgeFilter = std::function<bool(const RingOp&, const RingEdge&)>;
  void ignore_edges(EdgeFilter keep);
  // The consumer's work, on the consumer's lane after what is enqueued there
  // before it (as kernels on the consumer's stream). Skipped once the lane
  // has failed (a take that found its copy failed).
  void on_consumer(std::function<void()> work);

  // What it holds now, for leak checks.
  struct Holdings {
    std::size_t device_bytes = 0;  // the slots' own (a detached position's memory is its holder's)
    std::size_t staging_bytes = 0;
    std::size_t lane_threads = 0;
    std::size_t pending = 0;  // operations enqueued on lanes and not finished
  };
  Holdings holdings() const;
  std::vector<std::string> violations() const;
  std::size_t operations_checked() const;

  void make_slots(const RingPlan& plan) override;
  std::byte* staging_slot(std::size_t slot) override;
  std::byte* device_slot(std::size_t slot) override;
  std::shared_ptr<void> slot_memory(std::size_t slot) override;
  void stage(const RingOp& op, std::size_t bytes, const Fill& fill) override;
  void copy(const RingOp& op, std::size_t bytes, const std::vector<CopyPiece>& pieces) override;
  void transform(const RingOp& op, std::size_t bytes, const Transform& fn) override;
  void detach(const RingOp& op) override;
  bool copied(std::size_t position) const override;
  void ready(const RingOp& op) override;
  void mark(const RingOp& op, ConsumerLane lane) override;
  void drain(const RingOp& op, std::size_t bytes, const Drain& drain) override;
  void take(const RingOp& op, ConsumerLane lane) override;
  void release(const RingOp& op, ConsumerLane lane) override;
  std::optional<LaneFailure> failure() const override;
  void host_wait(OpRef op) override;
  bool keeps(const RingOp& op, const RingEdge& edge) const override;
  // A timed plan's consumer lane, by the clock: how long each take waited for its ready.
  IdleTimes idle() const override;
  void finish() noexcept override;

  struct State;

 private:
  void copy_out(const RingOp& op, std::size_t bytes, const std::vector<CopyPiece>& pieces);

  std::unique_ptr<State> s_;
};

}  // namespace sluice::ring
