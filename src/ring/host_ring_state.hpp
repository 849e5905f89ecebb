#pragma once
// The host ring executor's state, shared by its lanes: the plan, the slots,
// how far each operation has run, which position holds each slot, and what
// its checks have seen. Each operation runs through perform(): its waits
// (the edges the executor keeps), a seeded pause, the checks against the
// whole plan, its work. Host-only.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/lane_thread.hpp"
#include "engine/plan_check.hpp"
#include "ring/host_ring_executor.hpp"
#include "ring/ring_engine_plan.hpp"

namespace sluice::ring {

struct HostRingExecutor::State {
  using Run = engine::Progress;

  HostRingOptions options;
  mutable std::mutex mutex;
  std::condition_variable changed;
  std::optional<RingPlan> plan;
  std::optional<RingEnginePlan> engine_plan;  // *plan in the engine's form, for the checks
  // A device slot's memory is shared with whoever holds a position taken
  // from it (Ring::Taken::memory), so that a detached one outlives the slot.
  std::vector<std::shared_ptr<std::vector<std::byte>>> device;
  std::vector<std::vector<std::byte>> staging;
  std::unordered_map<std::size_t, Run> runs;  // by OpRef::index(): an unbounded ring has no end to size a vector by
  std::vector<RingFault> faults;
  EdgeFilter keep;
  std::vector<std::string> violations;
  std::size_t checked = 0;
  std::optional<LaneFailure> first_failure;
  bool copy_failed = false, consumer_failed = false;
  bool finishing = false;
  std::uint64_t consumer_work = 0;
  // side_lane: a transform whose ready does not wait for it (an edge left out).
  std::unique_ptr<engine::LaneThread> staging_lane, copy_lane, side_lane, consumer_lane;
  IdleTimes idle;  // takes enqueued; a timed plan's waits, by the clock, as the lane runs them
  std::size_t timed_takes = 0;
  std::chrono::steady_clock::time_point loop_start;

  Run& run(OpRef ref) { return runs[ref.index()]; }
  Run progress(OpRef ref) const {
    const auto at = runs.find(ref.index());
    return at == runs.end() ? Run::none : at->second;
  }
  bool finished(OpRef ref) const { return engine::settled(progress(ref)); }
  bool kept(const RingOp& op, const RingEdge& e) const { return !keep || keep(op, e); }

  void submitted(OpRef ref) {
    std::lock_guard lock(mutex);
    run(ref) = Run::submitted;
  }

  void jitter(std::uint64_t key) const;

  // The lane waits for the edges it keeps. The `ahead` edge is the
  // producer's host wait, in the engine. Once finishing, an operation never
  // submitted will not come: the wait gives up (the checks still see it).
  void wait_edges(const RingOp& op, std::unique_lock<std::mutex>& lock);

  void violation(std::string what) { violations.push_back(std::move(what)); }

  // The plan's edges and slots, as the operation starts (engine/plan_check.hpp).
  void check(const RingOp& op);

  // A take's wait for its ready, from `from` to now, into `idle`.
  void timed_take(std::chrono::steady_clock::time_point from);

  // Runs one operation of the plan on the calling lane: its waits, its
  // checks, its work. `lane_failed`: the lane's sticky failure (none for a
  // stage, whose failure goes to the producer that called it).
  // Returns the failure, empty when it ran.
  std::optional<std::string> perform(const RingOp& op, bool* lane_failed, const std::function<void()>& work);
};

}  // namespace sluice::ring
