#pragma once
// The ring to the host: carries what the caller's work makes on the device
// (a checkpoint's tensors, activations, gradients) into page-locked host
// memory and hands it to the host, through a plan of RingOptions::direction
// to_host (ring_plan.hpp), on any RingExecutor. Host-only: the same code runs
// on a GPU and on the host executor, which checks every edge in CI.
//
//   ToHostRing ring(plan, executor);
//   for (each chunk the caller's stream makes) {
//     ring.put({.bytes = n, .pieces = {{device_bytes, 0, n}},
//               .drain = [&](std::span<const std::byte> staged) { write(staged); }}, lane);
//   }
//   ring.finish();  // every position drained, or the first failure thrown
//
// put() marks the position on the caller's lane (after the work that makes
// its bytes), enqueues its copy on the copy lane, and returns: the caller
// goes on making the next while the copy runs. The ring's drainer thread
// waits for each copy in turn (the host must: it reads what the copy wrote)
// and runs the item's drain over the staging slot. The caller stays at most
// `ahead` positions beyond the drains: put() waits (the host) for the drain
// `ahead` positions back, after which that position's device bytes may be
// let go, and for the staging slot's last drain before its copy.
//
// A position that fails (a copy the device refused, a drain that threw)
// makes finish(), and every later put(), throw a RingError naming the
// position, its item and the step. stop(), or destroying the ring, leaves
// nothing running: the drainer joined, every lane drained, the slots gone,
// and what was not drained dropped.
#include <condition_variable>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "ring/ring.hpp"
#include "ring/ring_executor.hpp"
#include "ring/ring_plan.hpp"

namespace sluice::ring {

class ToHostRing {
 public:
  // Throws std::invalid_argument for a plan to the device, or what the
  // executor's make_slots throws, before any work.
  ToHostRing(RingPlan plan, RingExecutor& executor);
  ~ToHostRing();
  ToHostRing(const ToHostRing&) = delete;
  ToHostRing& operator=(const ToHostRing&) = delete;

  struct Item {
    std::size_t bytes = 0;          // of the staging slot the pieces fill (0: an unstaged plan's)
    std::vector<CopyPiece> pieces;  // from the caller's device memory (CopyPiece, to the host)
    RingExecutor::Drain drain = {};  // on the drainer thread once copied; empty: nothing to do but wait
  };
  // Waits for the caller's lead and the staging slot, then marks, copies and
  // readies the position, and returns it. Throws std::invalid_argument for a
  // piece with no device memory to read, or one that lies past `bytes` in
  // the staging slot (or has no memory of the caller's to go to, unstaged),
  // before any work; std::logic_error after close() or stop(), or past the
  // plan's last position; the RingError of a position that failed before.
  std::size_t put(Item item, ConsumerLane lane = {});
  // The position the next put() makes.
  std::size_t next_put() const;
  // The caller is done: finish() waits for what was put.
  void close();
  // close(), then waits until every position put is drained. Throws the
  // first position's failure as a RingError; the ring is stopped either way.
  void finish();
  // Whether a position's copy has run: its device bytes may be let go.
  bool copied(std::size_t position) const { return executor_.copied(position); }
  // Positions from the start that are drained.
  std::size_t drained() const;
  // Waits until `position` (one put) is drained. Throws the RingError of a
  // failure at or before it, std::logic_error once the ring is stopped first.
  void wait_drained(std::size_t position);
  // Ends the ring: nothing runs once it returns. Idempotent.
  void stop() noexcept;

  const RingPlan& plan() const { return plan_; }

 private:
  struct Put {
    std::size_t bytes = 0;
    RingExecutor::Drain drain;
  };
  void check(const Item& item) const;
  void drain_loop() noexcept;
  // The host waits for the drains `p`'s mark and copy wait on (the edges the executor keeps).
  void wait_for_drains(std::size_t p, std::unique_lock<std::mutex>& lock);
  // Where a lane failed first, or else the ring's own failure.
  [[noreturn]] void throw_failure(std::unique_lock<std::mutex>& lock);
  void fail(std::size_t p, Step step, std::exception_ptr cause);

  RingPlan plan_;
  RingExecutor& executor_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t put_;      // the next position to put
  std::size_t drained_;  // positions before this are drained
  std::map<std::size_t, Put> waiting_;  // put and not yet drained
  std::optional<RingError> error_;
  bool closed_ = false;
  bool stopping_ = false;
  bool stopped_ = false;
  bool putting_ = false;
  // The drainer has not returned yet. finish() after a failure waits for it,
  // so that the positions put before the failure are drained (as drain_loop
  // means them to be); it used to stop the drainer at once, after whichever
  // drain was running, so that drained() said less than the run had copied.
  bool draining_ = true;
  std::thread drainer_;  // last: starts when everything above exists
};

}  // namespace sluice::ring
