#pragma once
// The ring engine: hands a consumer the items of a plan (ring_plan.hpp) ahead
// of the moment it needs them, through a ring of device slots fed from
// staging slots on a copy lane, on any RingExecutor. Host-only: the same code
// runs on a GPU (streams and events) and on the host executor (threads).
//
//   Ring ring(plan, executor, {.fill = read_item});
//   while (auto t = ring.take(lane)) {   // position t->position, its item in t->data
//     launch work on `lane` reading t->data;
//   }                                    // position i is released at take i+held, or by release(i)
//
// The producer is the ring's own thread walking the plan, or the caller's
// (RingSource::put_by_caller: a prefetcher whose batches come from a Python
// iterable), who hands it items of any size with put() and ends with close().
// Either way it stays never more than `ahead` positions beyond
// the consumer: it stages each item (host threads), enqueues its copy (after
// the release of the slot's previous position, on the copy lane, not the
// host), and records ready. take() makes the consumer's lane wait for ready,
// never the host, except for the positions the producer has not reached.
// A position that fails makes take() of it throw a RingError naming the
// position, its item and the step. stop(), or destroying the ring, leaves
// nothing running: the producer joined, every lane drained, the slots gone.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <vector>
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
  RingError(std::size_t position, std::size_t item, Step step, const std::string& what, std::exception_ptr cause = nullptr);
  std::size_t position() const { return position_; }
  std::size_t item() const { return item_; }
  Step step() const { return step_; }
  // What the producer's side threw (a fill's read error, as its own type), where there was one.
  std::exception_ptr cause() const { return cause_; }

 private:
  std::size_t position_, item_;
  Step step_;
  std::exception_ptr cause_;
};

// Where an item's bytes come from: `fill` for a staged plan, `source` for an
// unstaged one; or the caller's put() (put_by_caller), with neither.
struct RingSource {
  bool put_by_caller = false;
  // Writes the item's slot_bytes into a staging slot, on the staging threads. Throws to fail the position.
  std::function<void(std::size_t item, std::span<std::byte> slot)> fill = {};
  // The item's slot_bytes, in memory the copy lane reaches (page-locked), kept by the caller while the ring runs.
  std::function<const std::byte*(std::size_t item)> source = {};
  // The bytes `fill` writes and the copy moves, at most slot_bytes (a
  // loader's short last batch); empty: slot_bytes. Asked on the producer's
  // thread, in position order, before the position's stage.
  std::function<std::size_t(std::size_t item)> bytes = {};
  // For a plan with out_bytes: the position's output from its copied bytes,
  // on the copy lane between the copy and ready (ring_executor.hpp).
  std::function<void(std::size_t item, void* lane, std::span<const std::byte> raw, std::span<std::byte> out)> transform = {};
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
    std::byte* out = nullptr;   // the transform's output in the slot (a plan with out_bytes)
    std::shared_ptr<void> memory;  // what holds `data`: kept past the release by detach()
  };
  // One item, from a producer of the caller's: `bytes` in its device slot,
  // `fill` writes the staged pieces into the staging slot (at their offsets)
  // on the staging threads, and `pieces` says what is copied from where to
  // where (CopyPiece: from the staging slot, or the caller's page-locked
  // memory, which it keeps until copied(position); into the slot, or the
  // caller's device memory). The staging slot gets the bytes up to the end
  // of the last staged piece.
  struct Item {
    std::size_t bytes = 0;
    RingExecutor::Fill fill = {};  // empty where nothing is staged
    std::vector<CopyPiece> pieces;
  };
  // Waits for the producer's lead (the host, as the ring's own producer
  // does), stages and enqueues the copy, and returns the position. Throws
  // std::logic_error without put_by_caller, after close(), or once the ring
  // is stopped, and std::invalid_argument for a piece past the item's bytes in its slot,
  // before any work; what the stage or copy throws fails the position
  // (take() of it throws a RingError) and is thrown here too.
  std::size_t put(const Item& item);
  // The position the next put() fills (one producer at a time).
  std::size_t next_put() const;
  // The producer is done: take() past the last position put returns nullopt.
  void close();
  // The producer failed before its next item: take() of that position throws
  // a RingError saying `what`.
  void fail(const std::string& what);
  // Whether the copy of a position put has run: its pieces' memory may be let go.
  bool copied(std::size_t position) const { return executor_.copied(position); }

  // The next position, once the consumer's lane waits for it; the oldest one
  // held is released first where the consumer holds `held` already.
  // nullopt past the last. Throws RingError for a failed position,
  // std::logic_error after stop().
  std::optional<Taken> take(ConsumerLane lane = {});
  // Whether take() would return without waiting for the producer, waiting up
  // to `timeout` for that (so that a caller can wake to check for an interrupt).
  bool ready_within(std::chrono::milliseconds timeout);
  // Releases a position the consumer holds before take() would.
  void release(std::size_t position, ConsumerLane lane = {});
  // Lets a position the consumer holds keep its memory beyond its release
  // (Taken::memory): its slot gets new memory for the positions after it.
  void detach(std::size_t position);
  // Ends the ring early: nothing runs once it returns. Idempotent.
  void stop() noexcept;

  // How long the consumer's lane waited so far (RingOptions::timed).
  IdleTimes idle() const { return executor_.idle(); }

  // Where a ring resumed with RingOptions::start = next_position() goes on.
  std::size_t next_position() const;
  const RingPlan& plan() const { return plan_; }

 private:
  void produce() noexcept;
  // Stage and copy of position p (any producer); the ahead wait is the caller's.
  void produce_position(std::size_t p, const Item& item, Step& step);
  // The bytes of the staging slot an item's staged pieces reach.
  static std::size_t staged_bytes(const Item& item);
  void wait_for_lead(std::size_t p);
  [[noreturn]] void throw_failure(std::unique_lock<std::mutex>& lock);
  // Where the consumer holds `position`; std::logic_error where it does not.
  std::deque<std::size_t>::iterator held_at(std::size_t position);
  void release_locked(std::size_t position, ConsumerLane lane);
  std::size_t end_locked() const { return closed_at_ ? *closed_at_ : plan_.positions(); }

  RingPlan plan_;
  RingExecutor& executor_;
  RingSource source_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t next_;      // the next position to take
  std::size_t produced_;  // positions before this have ready enqueued
  std::deque<std::size_t> held_;     // taken and not yet released, oldest first
  std::map<std::size_t, std::size_t> bytes_;  // of each position produced and not yet taken
  std::optional<std::size_t> closed_at_;      // the caller's producer is done: the positions end here
  std::optional<RingError> error_;   // the producer's failure
  bool stopping_ = false;
  bool stopped_ = false;
  bool putting_ = false;  // a caller's put() is enqueuing
  std::thread producer_;  // last: starts when everything above exists
};

}  // namespace sluice::ring
