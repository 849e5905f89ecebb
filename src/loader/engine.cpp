#include "engine.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "core/host_memory.hpp"
#include "core/made_on.hpp"
#include "pinned_slots.hpp"
#include "sluice/core/byte_size.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/error.hpp"

namespace sluice::detail {

namespace {

int least_priority(int device) {
  const DeviceScope scope(device);
  int least = 0, greatest = 0;
  SLUICE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return least;
}

int resolve(const std::optional<int>& device) {
  if (device) return *device;
  int current = 0;
  SLUICE_CUDA_CHECK(cudaGetDevice(&current));
  return current;
}

}  // namespace

PrefetchEngine::PrefetchEngine(BatchPlan plan, PrefetchSpec spec, const LoaderOptions& o)
    : plan_(std::move(plan)),
      spec_(std::move(spec)),
      ahead_(o.ahead),
      slots_(o.ahead + 1),
      device_(resolve(o.device)),
      copy_(made_on<Stream>(device_, least_priority(device_))),
      readers_(o.threads),
      loop_start_(made_on<Event>(device_, Event::Timing::enabled)),
      next_state_(plan_.resume_at(o.start)) {
  if (o.ahead < 1 || o.ahead > 30) throw std::invalid_argument("loader: ahead must be 1 to 30 batches");
  const DeviceScope scope(device_);
  const std::size_t rows = plan_.options().batch;
  const std::size_t host_bytes = rows * spec_.row_bytes;
  const std::size_t device_bytes = host_bytes + rows * spec_.out_row_bytes;
  std::size_t free_bytes = 0, total = 0;
  SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  if (slots_ * device_bytes > free_bytes)
    throw std::invalid_argument("loader: " + std::to_string(slots_) + " batches of " + format_bytes(device_bytes) +
                                " on the device need " + format_bytes(slots_ * device_bytes) + ", but only " +
                                format_bytes(free_bytes) + " are free: use a smaller batch, sequence or `ahead`");
  if (const std::size_t available = detail::available_host_memory(); available > 0 && slots_ * host_bytes > available / 2)
    throw std::invalid_argument("loader: " + format_bytes(slots_ * host_bytes) +
                                " of pinned slots would take over half the host's available " + format_bytes(available));
  for (std::size_t s = 0; s < slots_; ++s) {
    pinned_.push_back(take_pinned_slot(host_bytes));
    raw_.emplace_back(host_bytes, copy_.view());
    if (spec_.out_row_bytes > 0) out_.emplace_back(rows * spec_.out_row_bytes, copy_.view());
    h2d_done_.emplace_back(Event::Timing::disabled, Event::Wait::block);
  }
  for (std::size_t k = 0; k < ring; ++k) {
    ready_.emplace_back(Event::Timing::enabled);
    taken_events_.emplace_back(Event::Timing::enabled);
  }
  copy_.synchronize();  // the slots exist before any other stream uses them
  producer_ = std::thread([this] { produce(); });
}

PrefetchEngine::~PrefetchEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (producer_.joinable()) producer_.join();
  release_memory();
}

void PrefetchEngine::release_memory() noexcept {
  try {
    const DeviceScope scope(device_);
    // The loader's own copies out of the pinned slots: once done, the slots
    // can serve another loader.
    copy_.synchronize();
    for (auto& slot : pinned_) give_back_pinned_slot(std::move(slot));
    pinned_.clear();
    // The consumer's stream may still read the last batch: the device slots
    // are freed in its order (stream-ordered frees on the copy stream, after
    // it waits for the consumer's work so far), and the host does not wait.
    if (consumer_) {
      Event last_read;
      last_read.record(*consumer_);
      copy_.wait(last_read);
    }
    raw_.clear();
    out_.clear();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: stopping a loader: %s\n", e.what());
  }
}

void PrefetchEngine::harvest_idle(std::size_t batch) const {
  std::lock_guard lock(idle_mutex_);
  for (; harvested_ <= batch; ++harvested_) {
    const Event& taken = taken_events_[harvested_ % ring];
    const Event& ready = ready_[harvested_ % ring];
    taken.synchronize();
    ready.synchronize();
    // The batch was ready before the consumer got there: no wait.
    const double waited = std::max(0.0, static_cast<double>(elapsed_ms(taken, ready)));
    (harvested_ == 0 ? fill_ms_ : waited_ms_) += waited;
  }
}

void PrefetchEngine::produce() noexcept {
  LoaderState position = next_state_;
  std::size_t i = 0;
  try {
    const DeviceScope scope(device_);
    for (;; ++i, position = plan_.next(position)) {
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return stopping_ || i < taken_ + ahead_; });
        if (stopping_) return;
      }
      const std::size_t slot = i % slots_;
      // The pinned slot is refilled once the H2D that read it is done.
      if (i >= slots_) h2d_done_[slot].synchronize();
      const std::size_t rows = plan_.batch_rows(position);
      std::byte* host = pinned_[slot].data();
      const std::size_t per_piece = std::max<std::size_t>(1, rows / (2 * readers_.thread_count()));
      readers_.run(rows, per_piece, [&](std::size_t first, std::size_t count) {
        for (std::size_t r = first; r < first + count; ++r)
          spec_.read_row(plan_.item(position, r), host + r * spec_.row_bytes);
      });
      // The device slot is refilled once the consumer's stream has released
      // it: batch i - slots is released where the stream took the batch after it.
      if (i >= slots_) copy_.wait(taken_events_[(i - slots_ + 1) % ring]);
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(raw_[slot].data(), host, rows * spec_.row_bytes, cudaMemcpyHostToDevice, copy_.get()));
      h2d_done_[slot].record(copy_);
      if (spec_.transform) spec_.transform(copy_, raw_[slot].data(), out_[slot].data(), rows);
      if (i >= ring) harvest_idle(i - ring);  // before batch i - ring's events are recorded again
      ready_[i % ring].record(copy_);
      {
        std::lock_guard lock(mutex_);
        produced_ = i + 1;
      }
      changed_.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard lock(mutex_);
      failed_at_ = i;
      error_ = std::current_exception();
    }
    changed_.notify_all();
  }
}

PrefetchEngine::Taken PrefetchEngine::next(StreamView consumer) {
  std::size_t i = 0;
  LoaderState position;
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return produced_ > taken_ || failed_at_ <= taken_; });
    if (failed_at_ <= taken_) std::rethrow_exception(error_);
    i = taken_;
    position = next_state_;
  }
  const DeviceScope scope(device_);
  // Work the consumer put on its stream so far used the previous batch: past
  // this point in the stream, its slot may be refilled. The same event times
  // the wait that follows.
  taken_events_[i % ring].record(consumer);
  if (i == 1) loop_start_.record(consumer);  // once: the loop proper starts after the fill
  // A batch already on the device needs no wait: one operation less on the step's stream.
  if (const Event& ready = ready_[i % ring]; !ready.ready()) consumer.wait(ready);
  consumer_ = consumer;
  {
    std::lock_guard lock(mutex_);
    taken_ = i + 1;
    next_state_ = plan_.next(position);
  }
  changed_.notify_all();
  const std::size_t slot = i % slots_;
  const std::byte* data = spec_.out_row_bytes > 0 ? out_[slot].data() : raw_[slot].data();
  return {data, plan_.batch_rows(position), position, plan_.last_of_epoch(position)};
}

LoaderState PrefetchEngine::state() const {
  std::lock_guard lock(mutex_);
  return next_state_;
}

IdleReport PrefetchEngine::idle() const {
  std::size_t taken = 0;
  {
    std::lock_guard lock(mutex_);
    taken = taken_;
  }
  IdleReport report;
  report.steps = taken;
  if (taken == 0) return report;
  const DeviceScope scope(device_);
  harvest_idle(taken - 1);
  {
    std::lock_guard lock(idle_mutex_);
    report.waited_ms = waited_ms_;
    report.fill_ms = fill_ms_;
  }
  if (taken < 2) return report;
  // The loop runs from taking the second batch to taking the last.
  const Event& last = taken_events_[(taken - 1) % ring];
  loop_start_.synchronize();
  last.synchronize();
  report.loop_ms = static_cast<double>(elapsed_ms(loop_start_, last));
  return report;
}

}  // namespace sluice::detail
