#include "ring/ring.hpp"

#include <fmt/format.h>

#include <exception>
#include <utility>

namespace sluice::ring {

RingError::RingError(std::size_t position, std::size_t item, Step step, const std::string& what)
    : std::runtime_error(fmt::format("ring: position {} (item {}) failed at its {}: {}", position, item, to_string(step), what)),
      position_(position),
      item_(item),
      step_(step) {}

Ring::Ring(RingPlan plan, RingExecutor& executor, RingSource source)
    : plan_(std::move(plan)), executor_(executor), source_(std::move(source)), next_(plan_.start()), produced_(plan_.start()) {
  if (plan_.staged() && !source_.fill) throw std::invalid_argument("ring: a staged plan needs a fill function");
  if (!plan_.staged() && !source_.source) throw std::invalid_argument("ring: an unstaged plan needs a source function");
  executor_.make_slots(plan_);
  producer_ = std::thread([this] { produce(); });
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
  // After the producer: nothing more is enqueued while the lanes drain.
  executor_.finish();
}

void Ring::produce() noexcept {
  std::size_t p = plan_.start();
  Step step = Step::stage;
  try {
    for (; p < plan_.positions(); ++p) {
      const RingOp first = plan_.op(p, plan_.staged() ? Step::stage : Step::copy);
      // The producer's lead: the host waits here, so the ring holds at most
      // `ahead` positions beyond the consumer's and never runs away from it.
      for (const RingEdge& e : first) {
        if (e.why != Why::ahead || !executor_.keeps(first, e)) continue;
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return stopping_ || next_ > e.on.position; });
      }
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
      }
      const std::size_t item = plan_.item(p);
      step = Step::stage;
      const std::byte* from = nullptr;
      if (plan_.staged()) {
        executor_.stage(first, [&](std::span<std::byte> slot) { source_.fill(item, slot); });
        from = executor_.staging_slot(plan_.staging_slot(p));
      } else {
        step = Step::copy;
        from = source_.source(item);
      }
      step = Step::copy;
      executor_.copy(plan_.op(p, Step::copy), from);
      step = Step::ready;
      executor_.ready(plan_.op(p, Step::ready));
      {
        std::lock_guard lock(mutex_);
        produced_ = p + 1;
      }
      changed_.notify_all();
    }
  } catch (const std::exception& e) {
    std::lock_guard lock(mutex_);
    error_.emplace(p, plan_.item(p), step, e.what());
  } catch (...) {
    std::lock_guard lock(mutex_);
    error_.emplace(p, plan_.item(p), step, "an unknown exception");
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

std::optional<Ring::Taken> Ring::take(ConsumerLane lane) {
  std::unique_lock lock(mutex_);
  if (stopped_) throw std::logic_error("ring: take() after stop()");
  const std::size_t p = next_;
  if (p >= plan_.positions()) {
    if (held_) {
      executor_.release(plan_.op(*held_, Step::release), lane);
      held_.reset();
    }
    lock.unlock();
    // The end: the host waits for the last copy, where a failure of any copy
    // shows (on a GPU, the copy stream's sticky error); once, nothing is left.
    executor_.host_wait({plan_.positions() - 1, Step::ready});
    lock.lock();
    if (executor_.failure() || error_) throw_failure(lock);
    return std::nullopt;
  }
  changed_.wait(lock, [&] { return produced_ > p || error_.has_value(); });
  // A copy that failed at or before p fails this take; one after p, a later take.
  if (const auto failed = executor_.failure(); (failed && failed->at.position <= p) || produced_ <= p) throw_failure(lock);
  if (held_) {
    executor_.release(plan_.op(*held_, Step::release), lane);
    held_.reset();
  }
  executor_.take(plan_.op(p, Step::take), lane);
  held_ = p;
  next_ = p + 1;
  lock.unlock();
  changed_.notify_all();
  const std::size_t slot = plan_.device_slot(p);
  return Taken{p, plan_.item(p), slot, executor_.device_slot(slot), plan_.slot_bytes()};
}

void Ring::release(std::size_t position, ConsumerLane lane) {
  std::lock_guard lock(mutex_);
  if (stopped_) throw std::logic_error("ring: release() after stop()");
  if (!held_ || *held_ != position)
    throw std::logic_error(fmt::format("ring: position {} is not the one the consumer holds", position));
  executor_.release(plan_.op(position, Step::release), lane);
  held_.reset();
}

std::size_t Ring::next_position() const {
  std::lock_guard lock(mutex_);
  return next_;
}

}  // namespace sluice::ring
