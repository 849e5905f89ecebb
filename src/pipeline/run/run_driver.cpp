// The driver: the schedule's device operations, in submission order, and
// the stage-in work that feeds them (run.hpp says who does what).
#include <algorithm>
#include <cstring>

#include "run.hpp"
#include "sluice/pipeline/file_io.hpp"

namespace sluice::detail {

namespace {

constexpr std::size_t piece_bytes = StagingPool::default_piece_bytes;

// Pieces of a splittable source or sink hold whole items.
std::size_t item_piece_bytes(std::size_t item_bytes) {
  return std::max(item_bytes, piece_bytes / item_bytes * item_bytes);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void Run::drive() noexcept {
  const Schedule& s = *schedule_;
  std::size_t chunk = 0;
  try {
    const auto binding = exec_.bind_thread();
    // Host staging reads the caller's memory, which work already on the
    // caller's stream may still be writing: the first chunk waits for it.
    // So do the ends of spans that travel through their lock's pinned buffer.
    if (caller_ && (s.stages_in() || has_input_edges()) && s.chunk_count() > 0) exec_.wait_for_caller_on_host();
    edges_in();
    std::size_t next_h2d = 0;
    for (; chunk < s.chunk_count(); ++chunk) {
      if (has_failed()) break;
      submit_chunk(chunk, next_h2d);
      {
        std::lock_guard lock(mutex_);
        enqueued_ = chunk + 1;
      }
      progress_.notify_all();
    }
    if (!has_failed()) exec_.end_run(caller_);
  } catch (const Stopped&) {
  } catch (...) {
    if (!has_failed())
      fail(exec_.with_context(std::current_exception(), "") ? Failure::device : Failure::callback,
           std::min(chunk, s.chunk_count() - 1), "finish", std::current_exception());
  }
  driver_finished_.store(true, std::memory_order_release);
}

void Run::submit_chunk(std::size_t chunk, std::size_t& next_h2d) {
  const Schedule& s = *schedule_;
  for (; next_h2d <= s.last_h2d_with(chunk); ++next_h2d) submit(s.op(next_h2d, Stage::h2d));
  submit(s.op(chunk, Stage::compute));
  submit(s.op(chunk, Stage::d2h));
}

void Run::submit(const Op& op) {
  const auto begin = timed_ ? Clock::now() : Clock::time_point{};
  Clock::duration waited{};
  try {
    if (schedule_->stages_in()) start_ready_stage_ins();
    for (const Edge& edge : op.waits) {
      // Captured for replay, nothing runs: what the host would wait for is
      // an event set the drain frees, and a replayed run has no drain.
      if (mode_ == Mode::replay && on_host(edge.on.stage)) continue;
      if (!exec_.keeps(op, edge)) continue;
      if (on_host(edge.on.stage)) {
        const auto wait_begin = timed_ ? Clock::now() : Clock::time_point{};
        wait_on_host(edge);
        if (timed_) waited += Clock::now() - wait_begin;
        continue;
      }
      const bool same_lane = edge.on.stage == op.ref.stage &&
                             (op.ref.stage != Stage::compute || edge.on.chunk % schedule_->compute_streams() == op.stream);
      if (!same_lane) exec_.wait(op, edge.on);
    }
    if (op.after_caller) exec_.wait_for_caller(op);
    exec_.begin(op);
    const std::size_t c = op.ref.chunk;
    const std::size_t bytes_per_item = op.items.size();
    SpanSet& spans = core_.spans();
    SlotRings& rings = core_.rings();
    const std::size_t device_slot = schedule_->slot(Ring::device, c);
    switch (op.ref.stage) {
      case Stage::h2d:
        for (std::size_t k = 0; k < spans.size() && op.items.size() > 0; ++k) {
          const SpanRecord& span = spans[k];
          if (!span.copied_in()) continue;
          std::byte* device = rings.device(k, device_slot);
          if (span.host_pass())
            exec_.copy(op, device, rings.pinned_in(k, schedule_->slot(Ring::pinned_in, c)), bytes_per_item * span.item_bytes);
          else
            copy_direct(op, span, device, true);
        }
        break;
      case Stage::compute: {
        // A replay's callable runs at capture, not beside its kernels: its host time is not timed.
        const bool time_callable = learning_ && mode_ != Mode::replay;
        const auto launch = time_callable ? Clock::now() : Clock::time_point{};
        run_compute(op);
        if (time_callable)
          compute_enqueue_ms_[c] = std::chrono::duration<double, std::milli>(Clock::now() - launch).count();
        break;
      }
      case Stage::d2h:
        for (std::size_t k = 0; k < spans.size() && op.items.size() > 0; ++k) {
          const SpanRecord& span = spans[k];
          if (!span.copied_out()) continue;
          std::byte* device = rings.device(k, device_slot);
          if (span.host_pass())
            exec_.copy(op, rings.pinned_out(k, schedule_->slot(Ring::pinned_out, c)), device, bytes_per_item * span.item_bytes);
          else
            copy_direct(op, span, device, false);
        }
        break;
      default: break;
    }
    exec_.end(op);
    if (op.ref.stage == Stage::h2d) submitted_h2d_ = c + 1;
  } catch (const Stopped&) {
    throw;
  } catch (...) {
    if (!has_failed()) {
      const bool device = exec_.with_context(std::current_exception(), "") != nullptr;
      fail(device || op.ref.stage != Stage::compute ? Failure::device : Failure::callback, op.ref.chunk,
           std::string(to_string(op.ref.stage)), std::current_exception());
    }
    throw Stopped{};
  }
  if (timed_) driver_busy_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - begin - waited).count();
}

// Copies one chunk of a direct (page-locked) span, cut at its extents: a
// copy engine transfer must stay inside one allocation or registration.
// The span's sub-page ends that its own lock does not cover go through that
// lock's pinned buffer (span_set.hpp), filled before the run and emptied as
// each chunk lands (edges_in, edges_out).
void Run::copy_direct(const Op& op, const SpanRecord& span, void* slot, bool to_device) {
  const std::size_t begin = op.items.begin * span.item_bytes, end = op.items.end * span.item_bytes;
  auto* device = static_cast<std::byte*>(slot);
  const std::size_t bytes = span.bytes(), head = span.head(), tail = span.tail();
  auto piece = [&](std::size_t from, std::size_t to, bool edge) {
    from = std::max(begin, from);
    to = std::min(end, to);
    if (from >= to) return;
    std::byte* host = edge ? span.own_lock()->edge(from, bytes) : span.host + from;
    std::byte* dev = device + (from - begin);
    if (to_device)
      exec_.copy(op, dev, host, to - from);
    else
      exec_.copy(op, host, dev, to - from);
  };
  if (head > 0) piece(0, head, true);
  for (const auto& extent : span.extents) piece(extent.offset, extent.offset + extent.bytes, false);
  if (tail > 0) piece(bytes - tail, bytes, true);
}

namespace {

// The bytes of [begin, end) of a span that lie in its sub-page ends, each
// stretch given as (its place in the span, its place in the lock's buffer, bytes).
template <typename Fn>
void for_each_edge_piece(const SpanRecord& s, std::size_t begin, std::size_t end, Fn&& fn) {
  const std::size_t bytes = s.bytes();
  for (const auto& [edge_begin, edge_end] : {std::pair{std::size_t{0}, s.head()}, std::pair{bytes - s.tail(), bytes}}) {
    const std::size_t from = std::max(begin, edge_begin), to = std::min(end, edge_end);
    if (from < to) fn(s.host + from, s.own_lock()->edge(from, bytes), to - from);
  }
}

}  // namespace

void Run::edges_in() {
  for (const SpanRecord& s : core_.spans())
    if (s.copied_in() && s.through_edges())
      for_each_edge_piece(s, 0, s.bytes(), [](const std::byte* host, std::byte* edge, std::size_t n) {
        std::memcpy(edge, host, n);
      });
}

bool Run::has_input_edges() const {
  const SpanSet& spans = core_.spans();
  return std::any_of(spans.begin(), spans.end(), [](const SpanRecord& s) { return s.copied_in() && s.through_edges(); });
}

void Run::edges_out(ItemRange items) {
  for (const SpanRecord& s : core_.spans())
    if (s.copied_out() && s.through_edges())
      for_each_edge_piece(s, items.begin * s.item_bytes, items.end * s.item_bytes,
                          [](std::byte* host, const std::byte* edge, std::size_t n) { std::memcpy(host, edge, n); });
}

void Run::run_compute(const Op& op) {
  const std::size_t slot = schedule_->slot(Ring::device, op.ref.chunk);
  for (std::size_t k = 0; k < core_.spans().size(); ++k)
    chunk_slots_[k] = {core_.rings().device(k, slot), core_.spans()[k].item_bytes};
  const Chunk chunk(op.ref.chunk, schedule_->chunk_count(), op.items, StreamView{}, chunk_slots_, core_.generation());
  exec_.compute(op, chunk, core_.compute_fn());
}

// ---------------------------------------------------------------------------
// Waits on the host

void Run::wait_on_host(const Edge& edge) {
  switch (edge.on.stage) {
    case Stage::stage_in:
      if (next_stage_in_ <= edge.on.chunk) {
        // Its pinned slot is still being read by an earlier H2D: wait for that, then fill it.
        const Op stage_in = schedule_->op(edge.on);
        for (const Edge& before : stage_in.waits) {
          if (!exec_.keeps(stage_in, before)) continue;
          const OpStatus status = exec_.wait_done(before.on, Pause::sleep);
          if (status.error) {
            fail_from(status);
            throw Stopped{};
          }
        }
        start_stage_in(edge.on.chunk);
      }
      finish_stage_in(edge.on.chunk);
      break;
    case Stage::stage_out: wait_until_drained(edge.on.chunk); break;
    default: {
      const OpStatus status = exec_.wait_done(edge.on, Pause::sleep);
      if (status.error) {
        fail_from(status);
        throw Stopped{};
      }
    }
  }
}

void Run::wait_until_drained(std::size_t chunk) {
  if (mode_ == Mode::inline_drain) {
    while (drained_ <= chunk) {
      Draining d = begin_chunk(drained_);
      end_chunk(d);
    }
    return;
  }
  std::unique_lock lock(mutex_);
  progress_.wait(lock, [&] { return failed_ || drained_ > chunk; });
  if (failed_) throw Stopped{};
}

// Stage-in runs ahead of the H2D copies: a pinned slot is free once the H2D
// that read it last is done. Only slots already free are filled here; the
// driver never waits for one it does not need yet.
void Run::start_ready_stage_ins() {
  const Schedule& s = *schedule_;
  while (next_stage_in_ < s.chunk_count()) {
    const Op op = s.op(next_stage_in_, Stage::stage_in);
    for (const Edge& edge : op.waits) {
      if (!exec_.keeps(op, edge)) continue;
      if (edge.on.chunk >= submitted_h2d_) return;  // not even submitted yet
      const OpStatus status = exec_.status(edge.on);
      if (status.error) {
        fail_from(status);
        throw Stopped{};
      }
      if (!status.done) return;
    }
    start_stage_in(next_stage_in_);
  }
}

void Run::start_stage_in(std::size_t chunk) {
  const Op op = schedule_->op(chunk, Stage::stage_in);
  const std::size_t ring = schedule_->slot(Ring::pinned_in, chunk);
  HostSpan* times = core_.options().record ? stage_in_times_[ring].get() : nullptr;
  if (times) {
    times->first_ns = INT64_MAX;
    times->last_ns = 0;
  }
  try {
    exec_.host_started(op);
  } catch (...) {
    // Stage-in runs ahead of the operation being submitted: the failure is this chunk's.
    fail(Failure::device, chunk, std::string(to_string(Stage::stage_in)), std::current_exception());
    throw Stopped{};
  }
  SpanSet& spans = core_.spans();
  StagingPool& pool = core_.staging_pool();
  const ItemRange range = op.items;
  for (std::size_t k = 0; k < spans.size(); ++k) {
    SpanRecord& s = spans[k];
    if (!s.copied_in() || !s.host_pass()) continue;
    std::byte* pinned = core_.rings().pinned_in(k, ring);
    const std::size_t bytes = range.size() * s.item_bytes;
    StagingPool::PieceFn piece;
    std::size_t piece_size = piece_bytes;
    if (s.path == HostPath::staged) {
      piece_size = pool.piece_bytes_for(bytes);
      const std::byte* from = s.at(range.begin);
      piece = [pinned, from](std::size_t offset, std::size_t length) { std::memcpy(pinned + offset, from + offset, length); };
    } else if (s.source->splittable()) {
      piece_size = item_piece_bytes(s.item_bytes);
      Source* source = s.source.get();
      const std::size_t item_bytes = s.item_bytes;
      piece = [source, pinned, range, item_bytes](std::size_t offset, std::size_t length) {
        const std::size_t first = range.begin + offset / item_bytes;
        source->read({first, first + length / item_bytes}, {pinned + offset, length});
      };
    } else {
      piece_size = std::max<std::size_t>(bytes, 1);
      Source* source = s.source.get();
      ChunkGate* gate = &core_.gate(k);
      piece = [source, gate, pinned, range, chunk, bytes](std::size_t, std::size_t) {
        gate->enter(chunk);  // one call at a time, in chunk order
        try {
          source->read(range, {pinned, bytes});
        } catch (...) {
          gate->close();
          throw;
        }
        gate->leave();
      };
    }
    if (times)
      piece = [inner = std::move(piece), times](std::size_t offset, std::size_t length) {
        const std::int64_t begin = now_ns();
        inner(offset, length);
        const std::int64_t end = now_ns();
        for (auto first = times->first_ns.load(); begin < first && !times->first_ns.compare_exchange_weak(first, begin);) {}
        for (auto last = times->last_ns.load(); end > last && !times->last_ns.compare_exchange_weak(last, end);) {}
      };
    stage_in_jobs_[ring][k] = pool.submit(bytes, piece_size, std::move(piece));
  }
  next_stage_in_ = chunk + 1;
}

void Run::finish_stage_in(std::size_t chunk) {
  const std::size_t ring = schedule_->slot(Ring::pinned_in, chunk);
  SpanSet& spans = core_.spans();
  for (std::size_t k = 0; k < spans.size(); ++k) {
    auto& job = stage_in_jobs_[ring][k];
    if (!job) continue;
    try {
      job->wait();
    } catch (const IoError&) {
      fail(Failure::io, chunk, "stage-in, " + spans[k].describe(k), std::current_exception());
      throw Stopped{};
    } catch (...) {
      fail(spans[k].path == HostPath::source ? Failure::component : Failure::callback, chunk,
           "stage-in, " + spans[k].describe(k), std::current_exception());
      throw Stopped{};
    }
    job.reset();
  }
  exec_.host_finished(schedule_->op(chunk, Stage::stage_in));
  if (core_.options().record) {
    const HostSpan& t = *stage_in_times_[ring];
    const double origin_ns = static_cast<double>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(host_origin_.time_since_epoch()).count());
    if (t.last_ns > 0)
      driver_intervals_.push_back({Lane::stage_in, chunk, (static_cast<double>(t.first_ns.load()) - origin_ns) / 1e6,
                                   (static_cast<double>(t.last_ns.load()) - origin_ns) / 1e6,
                                   schedule_->op(chunk, Stage::stage_in).bytes, 0});
  }
}

}  // namespace sluice::detail
