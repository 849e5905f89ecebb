#include "ring/to_host_ring.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <utility>

#include "core/thread_name.hpp"

namespace sluice::ring {

namespace {

std::string what_of(std::exception_ptr cause) {
  try {
    std::rethrow_exception(std::move(cause));
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an unknown exception";
  }
}

}  // namespace

ToHostRing::ToHostRing(RingPlan plan, RingExecutor& executor)
    : plan_(std::move(plan)), executor_(executor), put_(plan_.start()), drained_(plan_.start()) {
  if (!plan_.to_host()) throw std::invalid_argument("ring: a ring to the host needs a plan to the host");
  executor_.make_slots(plan_);
  drainer_ = std::thread([this] {
    sluice::detail::name_this_thread("sluice-drain");
    drain_loop();
    {
      std::lock_guard lock(mutex_);
      draining_ = false;
    }
    changed_.notify_all();
  });
}

ToHostRing::~ToHostRing() { stop(); }

void ToHostRing::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = stopping_ = true;
  }
  changed_.notify_all();
  if (drainer_.joinable()) drainer_.join();
  {
    // A put() past its waits finishes what it enqueues; one still waiting wakes to stopping_.
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !putting_; });
  }
  executor_.finish();
  std::lock_guard lock(mutex_);
  waiting_.clear();
}

void ToHostRing::check(const Item& item) const {
  for (const CopyPiece& piece : item.pieces) {
    if (piece.bytes == 0) continue;  // none is copied (an empty tensor's memory may be null)
    if (!piece.from) throw std::invalid_argument("ring: a piece to the host with no device memory to read");
    if (piece.to) continue;
    if (!plan_.staged())
      throw std::invalid_argument("ring: an unstaged ring to the host copies into the caller's memory: a piece needs `to`");
    if (piece.offset > item.bytes || piece.bytes > item.bytes - piece.offset)
      throw std::invalid_argument(fmt::format("ring: a piece of {} bytes at offset {} lies past the item's {} bytes",
                                              piece.bytes, piece.offset, item.bytes));
  }
}

void ToHostRing::wait_for_drains(std::size_t p, std::unique_lock<std::mutex>& lock) {
  for (const Step step : {Step::mark, Step::copy}) {
    const RingOp op = plan_.op(p, step);
    for (const RingEdge& e : op) {
      if (e.on.step != Step::drain || !executor_.keeps(op, e)) continue;
      changed_.wait(lock, [&] { return stopping_ || error_ || drained_ > e.on.position; });
      if (stopping_) throw std::logic_error("ring: put() after stop()");
      if (error_) throw_failure(lock);
    }
  }
}

std::size_t ToHostRing::put(Item item, ConsumerLane lane) {
  check(item);
  std::erase_if(item.pieces, [](const CopyPiece& piece) { return piece.bytes == 0; });
  std::unique_lock lock(mutex_);
  if (stopping_) throw std::logic_error("ring: put() after stop()");
  if (closed_) throw std::logic_error("ring: put() after close()");
  if (error_) throw_failure(lock);
  if (putting_) throw std::logic_error("ring: put() from two threads at once");
  const std::size_t p = put_;
  if (p >= plan_.positions()) throw std::logic_error("ring: put() past the last position");
  wait_for_drains(p, lock);
  putting_ = true;
  waiting_[p] = {item.bytes, std::move(item.drain)};
  lock.unlock();
  Step step = Step::mark;
  try {
    executor_.mark(plan_.op(p, Step::mark), lane);
    step = Step::copy;
    executor_.copy(plan_.op(p, Step::copy), item.bytes, item.pieces);
    step = Step::ready;
    executor_.ready(plan_.op(p, Step::ready));
  } catch (...) {
    fail(p, step, std::current_exception());
    lock.lock();
    putting_ = false;
    lock.unlock();
    changed_.notify_all();
    throw;
  }
  lock.lock();
  put_ = p + 1;
  putting_ = false;
  lock.unlock();
  changed_.notify_all();
  return p;
}

std::size_t ToHostRing::next_put() const {
  std::lock_guard lock(mutex_);
  return put_;
}

std::size_t ToHostRing::drained() const {
  std::lock_guard lock(mutex_);
  return drained_;
}

void ToHostRing::wait_drained(std::size_t position) {
  std::unique_lock lock(mutex_);
  if (position >= put_) throw std::logic_error(fmt::format("ring: position {} was not put", position));
  // A failure past `position` leaves it to be drained: the drainer goes on up to the failed one.
  const auto failed_by = [&] { return error_ && error_->position() <= position; };
  changed_.wait(lock, [&] { return drained_ > position || failed_by() || stopping_; });
  if (drained_ > position) return;
  if (failed_by()) throw_failure(lock);
  throw std::logic_error(fmt::format("ring: stopped before position {} was drained", position));
}

void ToHostRing::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
}

void ToHostRing::finish() {
  close();
  std::unique_lock lock(mutex_);
  // After a failure, the drainer drains what was put before it, then returns (see draining_).
  changed_.wait(lock, [&] { return stopping_ || (error_ && !draining_) || drained_ >= put_; });
  if (error_) {
    lock.unlock();
    stop();
    lock.lock();
    throw_failure(lock);
  }
  if (stopping_) throw std::logic_error("ring: finish() after stop()");
  lock.unlock();
  stop();
}

void ToHostRing::fail(std::size_t p, Step step, std::exception_ptr cause) {
  {
    std::lock_guard lock(mutex_);
    if (!error_) error_.emplace(p, plan_.item(p), step, what_of(cause), cause);
  }
  changed_.notify_all();
}

void ToHostRing::throw_failure(std::unique_lock<std::mutex>& lock) {
  // A lane's failure comes first: it is the earlier position (the drain that
  // waited on the failed copy fails after it).
  if (const auto failed = executor_.failure()) {
    const RingError error(failed->at.position, plan_.item(failed->at.position), failed->at.step, failed->what);
    lock.unlock();
    throw error;
  }
  const RingError error = *error_;
  lock.unlock();
  throw error;
}

void ToHostRing::drain_loop() noexcept {
  for (std::size_t p = plan_.start();; ++p) {
    Put item;
    {
      std::unique_lock lock(mutex_);
      // Positions put before a failure are still drained: finish() and
      // drained() then say how far the run got.
      changed_.wait(lock, [&] { return stopping_ || put_ > p || ((closed_ || error_) && !putting_); });
      if (stopping_ || put_ <= p) return;
      item = std::move(waiting_.at(p));
      waiting_.erase(p);
    }
    try {
      executor_.drain(plan_.op(p, Step::drain), item.bytes, item.drain ? item.drain : [](std::span<const std::byte>) {});
    } catch (...) {
      fail(p, Step::drain, std::current_exception());
      return;
    }
    {
      std::lock_guard lock(mutex_);
      drained_ = p + 1;
    }
    changed_.notify_all();
  }
}

}  // namespace sluice::ring
