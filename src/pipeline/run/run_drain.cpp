// The drain: chunks finished in order, their outputs staged out and
// reported (run.hpp says who does what).
#include <algorithm>
#include <deque>
#include <thread>

#include "core/streaming_copy.hpp"
#include "run.hpp"
#include "sluice/pipeline/file_io.hpp"

namespace sluice::detail {

// Staged outputs of two chunks may be copied out at once: while one chunk's
// stage-out runs, the drain already waits for the next one's D2H, so the
// wake-up and the copy no longer add up chunk after chunk. Sinks see their
// chunks one at a time, in order (source.hpp), so with a sink the drain
// finishes each chunk before it starts the next.
void Run::drain() noexcept {
  std::size_t chunk = 0;
  std::deque<Draining> draining;  // chunks whose stage-out runs, oldest first
  try {
    const auto binding = exec_.bind_thread();
    bool sinks = false;
    for (const SpanRecord& span : core_.spans()) sinks |= span.sink != nullptr;
    // A chunk-done callable that throws ends the run right after its chunk:
    // nothing of the next may be written by then.
    const std::size_t at_once = schedule_->stages_out() && !sinks && !core_.done_fn() ? 2 : 1;
    auto end_oldest = [&] {
      end_chunk(draining.front());
      draining.pop_front();
    };
    auto end_all = [&] {
      while (!draining.empty()) end_oldest();
    };
    for (; chunk < schedule_->chunk_count(); ++chunk) {
      {
        std::unique_lock lock(mutex_);
        if (!failed_ && enqueued_ <= chunk && !draining.empty()) {
          // The driver may be waiting for these chunks' slots: finish them
          // before waiting for the driver.
          lock.unlock();
          end_all();
          lock.lock();
        }
        progress_.wait(lock, [&] { return failed_ || enqueued_ > chunk; });
        if (failed_) break;
      }
      while (draining.size() >= at_once) end_oldest();
      try {
        draining.push_back(begin_chunk(chunk));
      } catch (...) {
        // This chunk failed: the ones already on their way out finish first,
        // so the run counts every chunk whose outputs reached the host.
        end_all();
        throw;
      }
      while (!draining.empty() && draining.front().staged_out()) end_oldest();
    }
    end_all();
  } catch (...) {
    for (Draining& d : draining) d.settle();  // no staging work outlives the drain
    // Failures are recorded where they happen; anything else is the drain's own.
    if (!has_failed()) fail(Failure::callback, chunk, "drain", std::current_exception());
  }
  // The last touch of this run: the waiter may destroy it as soon as it sees this.
  drain_finished_.store(true, std::memory_order_release);
}

void Run::drive_and_drain() noexcept {
  drive();
  try {
    const auto binding = exec_.bind_thread();
    while (!has_failed() && drained_ < enqueued_) {
      Draining d = begin_chunk(drained_);
      end_chunk(d);
    }
  } catch (...) {
    if (!has_failed()) fail(Failure::callback, drained_, "drain", std::current_exception());
  }
  drain_finished_.store(true, std::memory_order_release);
}

void Run::await_drained() {
  if (mode_ == Mode::replay) {
    if (!has_failed() && schedule_->chunk_count() > 0) {
      if (std::exception_ptr error = exec_.replayer()->wait_replayed(Pause::yield)) {
        fail(Failure::device, schedule_->chunk_count() - 1, "replay", error);
      } else {
        edges_out({0, schedule_->plan().chunk(schedule_->chunk_count() - 1).end});
        host_end_ms_ = host_ms(Clock::now());  // the run's end, before its marks are read
        drained_ = schedule_->chunk_count();
        // A replayed run that learns was captured with a mark around every stage.
        if (timed_) try {
            for (std::size_t chunk = 0; chunk < drained_; ++chunk) record_device_intervals(chunk);
          } catch (...) {
            fail(Failure::device, drained_ - 1, "reading the replayed run's timing marks", std::current_exception());
          }
      }
    }
    drain_finished_.store(true, std::memory_order_release);
    return;
  }
  if (mode_ != Mode::inline_drain) {
    std::unique_lock lock(mutex_);
    progress_.wait(lock, [&] { return failed_ || drained_ + 1 >= schedule_->chunk_count(); });
  }
  // The last chunk is moments away: poll, rather than sleep and wake late.
  while (!drain_finished_.load(std::memory_order_acquire) || !driver_finished_.load(std::memory_order_acquire))
    std::this_thread::yield();
}

Run::Draining Run::begin_chunk(std::size_t chunk) {
  // Sleeping between queries leaves the core to the staging threads; at the
  // end of the run the wait only yields, so the run ends when its last copy
  // does. (Spinning through the whole of a pinned run measured no faster.)
  const OpStatus status = exec_.wait_done({chunk, Stage::d2h}, chunk < poll_from_ ? Pause::sleep : Pause::yield);
  if (status.error) {
    fail_from(status);
    throw Stopped{};
  }
  // Its copies out have landed: the ends that went through a lock's buffer land too, as a direct copy's bytes have.
  edges_out(schedule_->plan().chunk(chunk));
  edges_out_to_ = chunk + 1;
  if (timed_) record_device_intervals(chunk);
  Draining d{schedule_->op(chunk, Stage::stage_out), Clock::now(), {}};
  try {
    exec_.host_started(d.op);
  } catch (...) {
    fail(Failure::device, chunk, "stage-out", std::current_exception());
    throw Stopped{};
  }
  if (schedule_->stages_out()) d.jobs = start_stage_out(d.op);
  return d;
}

void Run::end_chunk(Draining& d) {
  const std::size_t chunk = d.op.ref.chunk;
  if (schedule_->stages_out()) finish_stage_out(d);
  if (const ChunkDoneFn& done = core_.done_fn()) {
    try {
      done(chunk, d.op.items);
    } catch (...) {
      fail(Failure::callback, chunk, done_stage, std::current_exception());
      // Its outputs are written (its sinks were given it): it counts as
      // finished, so that abandoned sinks keep it. Counted after fail(), so
      // that a driver waiting for its slots sees the failure, not the slots.
      {
        std::lock_guard lock(mutex_);
        drained_ = chunk + 1;
      }
      throw Stopped{};
    }
  }
  exec_.host_finished(d.op);
  {
    std::lock_guard lock(mutex_);
    drained_ = chunk + 1;
    if (drained_ == schedule_->chunk_count()) host_end_ms_ = host_ms(Clock::now());
  }
  progress_.notify_all();
}

bool Run::Draining::staged_out() const {
  return std::all_of(jobs.begin(), jobs.end(), [](const auto& job) { return job.second->done(); });
}

void Run::Draining::settle() noexcept {
  for (auto& [k, job] : jobs) try {
      job->wait();
    } catch (...) {
    }
  jobs.clear();
}

void Run::record_device_intervals(std::size_t chunk) {
  const Op h2d = schedule_->op(chunk, Stage::h2d), compute = schedule_->op(chunk, Stage::compute),
           d2h = schedule_->op(chunk, Stage::d2h);
  for (const Op* op : {&h2d, &compute, &d2h}) {
    const OpTimes t = exec_.times(op->ref);
    drain_intervals_.push_back({op->lane, chunk, t.start_ms, t.end_ms, op->bytes, static_cast<int>(op->stream)});
    // The run's first copy in and last copy out, read now: the event set is reused later.
    if (chunk == 0 && op->ref.stage == (schedule_->in_item_bytes() > 0 ? Stage::h2d : Stage::compute))
      first_copy_ms_ = t.start_ms;
    if (chunk + 1 == schedule_->chunk_count() &&
        op->ref.stage == (schedule_->out_item_bytes() > 0 ? Stage::d2h : Stage::compute))
      last_copy_ms_ = t.end_ms;
  }
}

// A sink's chunk starts only after the previous chunk's is complete, so a
// failure leaves nothing written past the last finished chunk.
std::vector<std::pair<std::size_t, StagingPool::Ticket>> Run::start_stage_out(const Op& op) {
  const std::size_t chunk = op.ref.chunk;
  const ItemRange range = op.items;
  const std::size_t ring = schedule_->slot(Ring::pinned_out, chunk);
  SpanSet& spans = core_.spans();
  StagingPool& pool = core_.staging_pool();
  std::vector<std::pair<std::size_t, StagingPool::Ticket>> jobs;
  for (std::size_t k = 0; k < spans.size(); ++k) {
    SpanRecord& s = spans[k];
    if (!s.copied_out() || !s.host_pass()) continue;
    const std::byte* pinned = core_.rings().pinned_out(k, ring);
    const std::size_t bytes = range.size() * s.item_bytes;
    if (s.path == HostPath::staged) {
      std::byte* to = s.at(range.begin);
      jobs.emplace_back(k, pool.submit(
                               bytes, pool.piece_bytes_for(bytes),
                               [to, pinned](std::size_t offset, std::size_t length) {
                                 copy_streaming(to + offset, pinned + offset, length);
                               },
                               StagingPool::Priority::urgent));
    } else if (s.sink->splittable()) {
      Sink* sink = s.sink.get();
      const std::size_t item_bytes = s.item_bytes;
      const std::size_t piece = std::max(item_bytes, StagingPool::default_piece_bytes / item_bytes * item_bytes);
      jobs.emplace_back(k, pool.submit(
                               bytes, piece,
                               [sink, pinned, range, item_bytes](std::size_t offset, std::size_t length) {
                                 const std::size_t first = range.begin + offset / item_bytes;
                                 sink->write({first, first + length / item_bytes}, {pinned + offset, length});
                               },
                               StagingPool::Priority::urgent));
    } else {
      Sink* sink = s.sink.get();
      jobs.emplace_back(k, pool.submit(
                               std::max<std::size_t>(bytes, 1), std::max<std::size_t>(bytes, 1),
                               [sink, pinned, range, bytes](std::size_t, std::size_t) { sink->write(range, {pinned, bytes}); },
                               StagingPool::Priority::urgent));
    }
  }
  return jobs;
}

void Run::finish_stage_out(Draining& d) {
  const std::size_t chunk = d.op.ref.chunk;
  SpanSet& spans = core_.spans();
  // Only this chunk's own failures stop it: a chunk whose outputs were all
  // written while another part of the run failed is finished, and counts as
  // such, so a sink is never told less was written than it was given.
  bool written = true;
  for (auto& [k, job] : d.jobs) {
    try {
      job->wait();
    } catch (const IoError&) {
      fail(Failure::io, chunk, "stage-out, " + spans[k].describe(k), std::current_exception());
      written = false;
    } catch (...) {
      fail(spans[k].path == HostPath::sink ? Failure::component : Failure::callback, chunk,
           "stage-out, " + spans[k].describe(k), std::current_exception());
      written = false;
    }
  }
  if (!written) throw Stopped{};
  if (core_.options().record && !d.jobs.empty())
    drain_intervals_.push_back({Lane::stage_out, chunk, host_ms(d.begin), host_ms(Clock::now()), d.op.bytes, 0});
  d.jobs.clear();
}

}  // namespace sluice::detail
