#pragma once
// The ring engine: hands a consumer the items of a plan (ring_plan.hpp) ahead
// of the moment it needs them, through a ring of device slots fed from
// staging slots on a copy lane, on any RingExecutor. Host-only: the same code
// runs on a GPU (streams and events) and on the host executor (threads).
//
//   Ring ring(plan, executor, {.fill = read_item});
//   while (auto t = ring.take(lane)) {   // position t->position, its item in t->data
//     launch work on `lane` reading t->data;
//   }                                    // position i is released at take i+1, or by release(i)
//
// A producer thread walks the plan, never more than `ahead` positions beyond
// the consumer: it stages each item (host threads), enqueues its copy (after
// the release of the slot's previous position, on the copy lane, not the
// host), and records ready. take() makes the consumer's lane wait for ready,
// never the host, except for the positions the producer has not reached.
// A position that fails makes take() of it throw a RingError naming the
// position, its item and the step. stop(), or destroying the ring, leaves
// nothing running: the producer joined, every lane drained, the slots gone.
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>

#include "ring/ring_executor.hpp"
#include "ring/ring_plan.hpp"

namespace sluice::ring {

// A position that failed: where, and which step.
class RingError : public std::runtime_error {
 public:
  RingError(std::size_t position, std::size_t item, Step step, const std::string& what);
  std::size_t position() const { return position_; }
  std::size_t item() const { return item_; }
  Step step() const { return step_; }

 private:
  std::size_t position_, item_;
  Step step_;
};

// Where an item's bytes come from: `fill` for a staged plan, `source` for an unstaged one.
struct RingSource {
  // Writes the item's slot_bytes into a staging slot, on the staging threads. Throws to fail the position.
  std::function<void(std::size_t item, std::span<std::byte> slot)> fill = {};
  // The item's slot_bytes, in memory the copy lane reaches (page-locked), kept by the caller while the ring runs.
  std::function<const std::byte*(std::size_t item)> source = {};
};

class Ring {
 public:
  // Throws std::invalid_argument (no fill for a staged plan, no source for an
  // unstaged one) or what the executor's make_slots throws, before any work.
  Ring(RingPlan plan, RingExecutor& executor, RingSource source);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  struct Taken {
    std::size_t position = 0;
    std::size_t item = 0;
    std::size_t slot = 0;
    std::byte* data = nullptr;  // the device slot, valid on the consumer's lane until the position is released
    std::size_t bytes = 0;
  };
  // The next position, once the consumer's lane waits for it; the previous
  // one is released first if the consumer has not. nullopt past the last.
  // Throws RingError for a failed position, std::logic_error after stop().
  std::optional<Taken> take(ConsumerLane lane = {});
  // Releases the position the consumer holds (the last taken) before the next take.
  void release(std::size_t position, ConsumerLane lane = {});
  // Ends the ring early: nothing runs once it returns. Idempotent.
  void stop() noexcept;

  // Where a ring resumed with RingOptions::start = next_position() goes on.
  std::size_t next_position() const;
  const RingPlan& plan() const { return plan_; }

 private:
  void produce() noexcept;
  [[noreturn]] void throw_failure(std::unique_lock<std::mutex>& lock);

  RingPlan plan_;
  RingExecutor& executor_;
  RingSource source_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t next_;      // the next position to take
  std::size_t produced_;  // positions before this have ready enqueued
  std::optional<std::size_t> held_;  // taken and not yet released
  std::optional<RingError> error_;   // the producer's failure
  bool stopping_ = false;
  bool stopped_ = false;
  std::thread producer_;  // last: starts when everything above exists
};

}  // namespace sluice::ring
