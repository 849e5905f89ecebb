#include "ring/ring.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <utility>

#include "core/thread_name.hpp"

namespace sluice::ring {

RingError::RingError(std::size_t position, std::size_t item, Step step, const std::string& what, std::exception_ptr cause)
    : std::runtime_error(fmt::format("ring: position {} (item {}) failed at its {}: {}", position, item, to_string(step), what)),
      position_(position),
      item_(item),
      step_(step),
      cause_(std::move(cause)) {}

Ring::Ring(RingPlan plan, RingExecutor& executor, RingSource source)
    : plan_(std::move(plan)), executor_(executor), source_(std::move(source)), next_(plan_.start()), produced_(plan_.start()) {
  if (!source_.put_by_caller) {
    if (plan_.staged() && !source_.fill) throw std::invalid_argument("ring: a staged plan needs a fill function");
    if (!plan_.staged() && !source_.source) throw std::invalid_argument("ring: an unstaged plan needs a source function");
  } else if (!plan_.staged()) {
    throw std::invalid_argument("ring: the caller's items are staged (their pieces may still point at page-locked memory)");
  }
  if (plan_.transformed() && (source_.put_by_caller || !source_.transform))
    throw std::invalid_argument("ring: a plan with a transform needs the ring's own producer and a transform function");
  if (!plan_.transformed() && source_.transform)
    throw std::invalid_argument("ring: a transform function for a plan without out_bytes");
  executor_.make_slots(plan_);
  if (!source_.put_by_caller) producer_ = std::thread([this] {
      sluice::detail::name_this_thread("sluice-ring");
      produce();
    });
}

Ring::~Ring() { stop(); }

void Ring::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = stopping_ = true;
  }
  changed_.notify_all();
  if (producer_.joinable()) producer_.join();
  {
    // A caller's put() past its lead finishes what it enqueues; one blocked
    // on its lead wakes to stopping_ and enqueues nothing.
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !putting_; });
  }
  // After the producer: nothing more is enqueued while the lanes drain.
  executor_.finish();
}

void Ring::wait_for_lead(std::size_t p) {
  // The producer's lead: the host waits here, so the ring holds at most
  // `ahead` positions beyond the consumer's and never runs away from it.
  const RingOp first = plan_.op(p, plan_.staged() ? Step::stage : Step::copy);
  for (const RingEdge& e : first) {
    if (e.why != Why::ahead || !executor_.keeps(first, e)) continue;
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return stopping_ || next_ > e.on.position; });
  }
}

void Ring::produce_position(std::size_t p, const Item& item, Step& step) {
  step = Step::stage;
  if (plan_.staged()) executor_.stage(plan_.op(p, Step::stage), staged_bytes(item), item.fill ? item.fill : [](std::span<std::byte>) {});
  step = Step::copy;
  executor_.copy(plan_.op(p, Step::copy), item.bytes, item.pieces);
  if (plan_.transformed()) {
    step = Step::transform;
    executor_.transform(plan_.op(p, Step::transform), item.bytes,
                        [this, it = plan_.item(p)](void* lane, std::span<const std::byte> raw, std::span<std::byte> out) {
                          source_.transform(it, lane, raw, out);
                        });
  }
  step = Step::ready;
  executor_.ready(plan_.op(p, Step::ready));
  {
    std::lock_guard lock(mutex_);
    bytes_[p] = item.bytes;
    produced_ = p + 1;
  }
  changed_.notify_all();
}

void Ring::produce() noexcept {
  std::size_t p = plan_.start();
  Step step = Step::stage;
  try {
    for (; p < plan_.positions(); ++p) {
      wait_for_lead(p);
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
      }
      const std::size_t item = plan_.item(p);
      step = Step::stage;
      const std::size_t bytes = source_.bytes ? source_.bytes(item) : plan_.slot_bytes();
      if (bytes > plan_.slot_bytes())
        throw std::invalid_argument(fmt::format("ring: an item of {} bytes in slots of {}", bytes, plan_.slot_bytes()));
      Item one{bytes, {}, {{nullptr, 0, bytes}}};
      step = Step::copy;  // an unstaged ring's source is asked for the copy
      if (plan_.staged())
        one.fill = [&](std::span<std::byte> slot) { source_.fill(item, slot); };
      else
        one.pieces.front().from = source_.source(item);
      produce_position(p, one, step);
    }
  } catch (const std::exception& e) {
    std::lock_guard lock(mutex_);
    error_.emplace(p, plan_.item(p), step, e.what(), std::current_exception());
  } catch (...) {
    std::lock_guard lock(mutex_);
    error_.emplace(p, plan_.item(p), step, "an unknown exception", std::current_exception());
  }
  changed_.notify_all();
}

std::size_t Ring::staged_bytes(const Item& item) {
  std::size_t end = 0;
  for (const CopyPiece& piece : item.pieces)
    if (!piece.from) end = std::max(end, piece.offset + piece.bytes);
  return end;
}

std::size_t Ring::put(const Item& item) {
  for (const CopyPiece& piece : item.pieces)
    if (piece.to ? piece.bytes > SIZE_MAX - piece.offset
                 : piece.offset > item.bytes || piece.bytes > item.bytes - piece.offset)
      throw std::invalid_argument(fmt::format("ring: a piece of {} bytes at offset {} lies past the item's {} bytes",
                                              piece.bytes, piece.offset, item.bytes));
  std::size_t p = 0;
  {
    std::lock_guard lock(mutex_);
    if (!source_.put_by_caller) throw std::logic_error("ring: put() on a ring whose own thread produces");
    if (stopping_) throw std::logic_error("ring: put() after stop()");
    if (closed_at_) throw std::logic_error("ring: put() after close()");
    if (error_) throw std::logic_error("ring: put() after the producer failed");
    p = produced_;
    if (p >= plan_.positions()) throw std::logic_error("ring: put() past the last position");
  }
  wait_for_lead(p);
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw std::logic_error("ring: put() after stop()");
    putting_ = true;
  }
  Step step = Step::stage;
  try {
    produce_position(p, item, step);
  } catch (const std::exception& e) {
    {
      std::lock_guard lock(mutex_);
      error_.emplace(p, plan_.item(p), step, e.what(), std::current_exception());
      putting_ = false;
    }
    changed_.notify_all();
    throw;
  }
  {
    std::lock_guard lock(mutex_);
    putting_ = false;
  }
  changed_.notify_all();
  return p;
}

void Ring::close() {
  {
    std::lock_guard lock(mutex_);
    if (!source_.put_by_caller) throw std::logic_error("ring: close() on a ring whose own thread produces");
    if (!closed_at_) closed_at_ = produced_;
  }
  changed_.notify_all();
}

void Ring::fail(const std::string& what) {
  {
    std::lock_guard lock(mutex_);
    if (!source_.put_by_caller) throw std::logic_error("ring: fail() on a ring whose own thread produces");
    if (!error_ && !closed_at_) error_.emplace(produced_, plan_.item(produced_), Step::stage, what);
  }
  changed_.notify_all();
}

void Ring::throw_failure(std::unique_lock<std::mutex>& lock) {
  // A lane's failure comes first: it is the earlier position (the producer
  // fails later, when it waits on the failed copy).
  if (const auto failed = executor_.failure()) {
    const RingError error(failed->at.position, plan_.item(failed->at.position), failed->at.step, failed->what);
    lock.unlock();
    throw error;
  }
  const RingError error = *error_;
  lock.unlock();
  throw error;
}

std::deque<std::size_t>::iterator Ring::held_at(std::size_t position) {
  const auto at = std::find(held_.begin(), held_.end(), position);
  if (at == held_.end()) throw std::logic_error(fmt::format("ring: position {} is not one the consumer holds", position));
  return at;
}

void Ring::release_locked(std::size_t position, ConsumerLane lane) {
  const auto at = held_at(position);
  executor_.release(plan_.op(position, Step::release), lane);
  held_.erase(at);
}

bool Ring::ready_within(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] {
    return stopped_ || produced_ > next_ || error_.has_value() || next_ >= end_locked();
  });
}

std::optional<Ring::Taken> Ring::take(ConsumerLane lane) {
  std::unique_lock lock(mutex_);
  if (stopped_) throw std::logic_error("ring: take() after stop()");
  const std::size_t p = next_;
  changed_.wait(lock, [&] { return produced_ > p || error_.has_value() || p >= end_locked() || stopping_; });
  if (stopping_) throw std::logic_error("ring: take() after stop()");
  if (p >= end_locked() && produced_ <= p && !error_) {
    while (!held_.empty()) release_locked(held_.front(), lane);
    lock.unlock();
    // The end: the host waits for the last copy, where a failure of any copy
    // shows (on a GPU, the copy stream's sticky error); once, nothing is left.
    if (p > plan_.start()) executor_.host_wait({p - 1, Step::ready});
    lock.lock();
    if (executor_.failure() || error_) throw_failure(lock);
    return std::nullopt;
  }
  // A copy that failed at or before p fails this take; one after p, a later take.
  if (const auto failed = executor_.failure(); (failed && failed->at.position <= p) || produced_ <= p) throw_failure(lock);
  while (held_.size() > plan_.held()) release_locked(held_.front(), lane);  // none: held never passes it
  if (held_.size() == plan_.held()) {
    // The release of the oldest and this take meet at one point of the
    // consumer's lane: the executor may mark it once for both.
    executor_.release_and_take(plan_.op(held_.front(), Step::release), plan_.op(p, Step::take), lane);
    held_.pop_front();
  } else {
    executor_.take(plan_.op(p, Step::take), lane);
  }
  held_.push_back(p);
  next_ = p + 1;
  const std::size_t bytes = bytes_.at(p);
  bytes_.erase(p);
  const std::size_t slot = plan_.device_slot(p);
  std::byte* data = executor_.device_slot(slot);
  Taken taken{p, plan_.item(p), slot, data, bytes, plan_.transformed() ? data + plan_.out_offset() : nullptr,
              executor_.slot_memory(slot)};
  lock.unlock();
  changed_.notify_all();
  return taken;
}

void Ring::release(std::size_t position, ConsumerLane lane) {
  std::lock_guard lock(mutex_);
  if (stopped_) throw std::logic_error("ring: release() after stop()");
  release_locked(position, lane);
}

void Ring::detach(std::size_t position) {
  std::lock_guard lock(mutex_);
  if (stopped_) throw std::logic_error("ring: detach() after stop()");
  (void)held_at(position);
  executor_.detach(plan_.op(position, Step::release));
}

std::size_t Ring::next_put() const {
  std::lock_guard lock(mutex_);
  return produced_;
}

std::size_t Ring::next_position() const {
  std::lock_guard lock(mutex_);
  return next_;
}

}  // namespace sluice::ring
