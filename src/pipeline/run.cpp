// One run: the driver and the drain (run_state.hpp says who does what).
#include <algorithm>
#include <cstring>
#include <thread>

#include "core/event_poll.hpp"
#include "core/nvtx_range.hpp"
#include "run_state.hpp"
#include "sluice/device_scope.hpp"
#include "sluice/error.hpp"
#include "sluice/file_io.hpp"
#include "streaming_copy.hpp"

namespace sluice {

using detail::HostPath;
using detail::SpanRecord;

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

Submission::State::State(std::shared_ptr<Pipeline::Engine> engine, ChunkPlan p, std::optional<StreamView> c)
    : owner(std::move(engine)), e(*owner), plan(std::move(p)), caller(c) {
  timed = e.options.record || e.options.report_bound;
  for (const auto& s : e.spans) {
    stages_in |= s.host_pass() && s.copied_in();
    stages_out |= s.host_pass() && s.copied_out();
  }
  stage_in_jobs.assign(e.in_slots(), std::vector<StagingPool::Ticket>(e.spans.size()));
  std::size_t item_bytes = 0;
  for (const auto& s : e.spans) item_bytes += s.item_bytes;
  constexpr std::size_t poll_bytes = std::size_t{32} << 20;
  poll_from = plan.chunk_count();
  for (std::size_t tail = 0; poll_from > 0;) {
    tail += plan.chunk(poll_from - 1).size() * item_bytes;
    if (tail > poll_bytes && poll_from < plan.chunk_count()) break;
    --poll_from;
  }
  if (e.options.record)
    for (std::size_t i = 0; i < e.in_slots(); ++i) stage_in_times.push_back(std::make_unique<HostSpan>());
}

std::string Submission::State::chunk_text(std::size_t chunk) const {
  const ItemRange r = plan.chunk(chunk);
  return "chunk " + std::to_string(chunk) + " of " + std::to_string(plan.chunk_count()) + " (items " +
         std::to_string(r.begin) + ".." + std::to_string(r.end) + ")";
}

void Submission::State::fail(Failure kind, std::size_t chunk, std::string stage, std::exception_ptr err) {
  {
    std::lock_guard lock(mutex);
    if (!failed) {
      failure = kind;
      failed_chunk = chunk;
      failed_stage = std::move(stage);
      error = err;
    }
    failed = true;
  }
  for (auto& gate : e.gates) gate->close();  // a source or sink waiting its turn gives up
  progress.notify_all();
}

bool Submission::State::has_failed() {
  std::lock_guard lock(mutex);
  return failed;
}

// ---------------------------------------------------------------------------
// Driver

void Submission::State::copy_direct(const SpanRecord& span, ItemRange range, void* slot, bool to_device,
                                    StreamView stream) {
  const std::size_t begin = range.begin * span.item_bytes, end = range.end * span.item_bytes;
  auto* device = static_cast<std::byte*>(slot);
  for (const auto& extent : span.extents) {
    const std::size_t from = std::max(begin, extent.offset), to = std::min(end, extent.offset + extent.bytes);
    if (from >= to) continue;
    std::byte* host = span.host + from;
    std::byte* dev = device + (from - begin);
    if (to_device)
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(dev, host, to - from, cudaMemcpyHostToDevice, stream.get()));
    else
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(host, dev, to - from, cudaMemcpyDeviceToHost, stream.get()));
  }
}

void Submission::State::submit_stage_in(std::size_t chunk) {
  const ItemRange range = plan.chunk(chunk);
  const std::size_t ring = chunk % e.in_slots();
  HostSpan* times = e.options.record ? stage_in_times[ring].get() : nullptr;
  if (times) {
    times->first_ns = INT64_MAX;
    times->last_ns = 0;
  }
  for (std::size_t k = 0; k < e.spans.size(); ++k) {
    SpanRecord& s = e.spans[k];
    if (!s.copied_in() || !s.host_pass()) continue;
    std::byte* pinned = e.pinned_in[k][ring].data();
    const std::size_t bytes = range.size() * s.item_bytes;
    StagingPool::PieceFn piece;
    std::size_t piece_size = piece_bytes;
    if (s.path == HostPath::staged) {
      piece_size = e.staging_pool().piece_bytes_for(bytes);
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
      detail::ChunkGate* gate = e.gates[k].get();
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
    stage_in_jobs[ring][k] = e.staging_pool().submit(bytes, piece_size, std::move(piece));
  }
  next_stage_in = chunk + 1;
}

// Stage-in runs ahead of the H2D copies: a pinned slot is free once the H2D
// that read it last (chunk - in_slots) is done. Only slots already free are
// filled here; the driver never waits for one it does not need yet.
void Submission::State::submit_ready_stage_ins(std::size_t chunk) {
  while (next_stage_in < plan.chunk_count() && next_stage_in < chunk + e.in_slots()) {
    const std::size_t j = next_stage_in;
    if (j >= e.in_slots() && !e.events[(j - e.in_slots()) % e.event_sets()].h2d_done.ready()) break;
    submit_stage_in(j);
  }
}

void Submission::State::wait_stage_in(std::size_t chunk) {
  const std::size_t ring = chunk % e.in_slots();
  for (std::size_t k = 0; k < e.spans.size(); ++k) {
    auto& job = stage_in_jobs[ring][k];
    if (!job) continue;
    try {
      job->wait();
    } catch (const IoError&) {
      fail(Failure::io, chunk, "stage-in, " + e.spans[k].describe(k), std::current_exception());
      throw;
    } catch (...) {
      fail(e.spans[k].path == HostPath::source ? Failure::component : Failure::callback, chunk,
           "stage-in, " + e.spans[k].describe(k), std::current_exception());
      throw;
    }
  }
  if (e.options.record) {
    const HostSpan& t = *stage_in_times[ring];
    const double origin_ns = static_cast<double>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(host_origin.time_since_epoch()).count());
    if (t.last_ns > 0) {
      std::size_t bytes = 0;
      for (const auto& s : e.spans)
        if (s.copied_in() && s.host_pass()) bytes += plan.chunk(chunk).size() * s.item_bytes;
      driver_intervals.push_back({Lane::stage_in, chunk, (static_cast<double>(t.first_ns.load()) - origin_ns) / 1e6,
                                  (static_cast<double>(t.last_ns.load()) - origin_ns) / 1e6, bytes, 0});
    }
  }
}

void Submission::State::enqueue_h2d(std::size_t chunk) {
  const ItemRange range = plan.chunk(chunk);
  const std::size_t slot = chunk % e.depth();
  detail::ChunkEvents& ev = e.events[chunk % e.event_sets()];
  const detail::NvtxRange nvtx("h2d", chunk);
  if (chunk == 0 && caller) e.h2d.wait(caller_ready);
  // The device slot is free once the chunk that used it last has left the device.
  if (chunk >= e.depth()) e.h2d.wait(e.events[(chunk - e.depth()) % e.event_sets()].d2h_done);
  if (timed) ev.h2d_start.record(e.h2d);
  for (std::size_t k = 0; k < e.spans.size(); ++k) {
    const SpanRecord& s = e.spans[k];
    if (!s.copied_in() || range.size() == 0) continue;
    void* device = e.device_slots[k][slot].data();
    if (s.host_pass())
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(device, e.pinned_in[k][chunk % e.in_slots()].data(), range.size() * s.item_bytes,
                                        cudaMemcpyHostToDevice, e.h2d.get()));
    else
      copy_direct(s, range, device, true, e.h2d);
  }
  ev.h2d_done.record(e.h2d);
}

void Submission::State::enqueue_compute(std::size_t chunk) {
  const std::size_t slot = chunk % e.depth();
  detail::ChunkEvents& ev = e.events[chunk % e.event_sets()];
  Stream& stream = e.compute[chunk % e.compute.size()];
  const detail::NvtxRange nvtx("compute", chunk);
  stream.wait(ev.h2d_done);
  if (timed) ev.compute_start.record(stream);
  std::vector<DeviceSlot> slots(e.spans.size());
  for (std::size_t k = 0; k < e.spans.size(); ++k) slots[k] = {e.device_slots[k][slot].data(), e.spans[k].item_bytes};
  try {
    e.compute_fn(Chunk{chunk, plan.chunk_count(), plan.chunk(chunk), stream.view(), slots, e.generation});
  } catch (const CudaError&) {
    fail(Failure::cuda, chunk, "compute", std::current_exception());
    throw;
  } catch (...) {
    fail(Failure::callback, chunk, "compute", std::current_exception());
    throw;
  }
  // A bad launch configuration shows here.
  if (const cudaError_t launch = cudaGetLastError(); launch != cudaSuccess) {
    fail(Failure::cuda, chunk, "compute",
         std::make_exception_ptr(CudaError(launch, "a kernel launch by the compute callable", __FILE__, __LINE__)));
    throw std::runtime_error("launch failed");
  }
  ev.compute_done.record(stream);
}

void Submission::State::enqueue_d2h(std::size_t chunk) {
  const ItemRange range = plan.chunk(chunk);
  const std::size_t slot = chunk % e.depth();
  detail::ChunkEvents& ev = e.events[chunk % e.event_sets()];
  const detail::NvtxRange nvtx("d2h", chunk);
  // In chunk order, whichever compute stream ran it: the D2H stream's
  // position therefore says every earlier chunk's compute is done too.
  e.d2h.wait(ev.compute_done);
  if (timed) ev.d2h_start.record(e.d2h);
  for (std::size_t k = 0; k < e.spans.size(); ++k) {
    const SpanRecord& s = e.spans[k];
    if (!s.copied_out() || range.size() == 0) continue;
    void* device = e.device_slots[k][slot].data();
    if (s.host_pass())
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(e.pinned_out[k][chunk % e.out_slots()].data(), device,
                                        range.size() * s.item_bytes, cudaMemcpyDeviceToHost, e.d2h.get()));
    else
      copy_direct(s, range, device, false, e.d2h);
  }
  ev.d2h_done.record(e.d2h);
}

std::size_t Submission::State::last_h2d_with(std::size_t chunk) const {
  if (stages_in) return chunk;  // a copy ahead would wait for its staging, and hold up this chunk's kernel
  return std::min(plan.chunk_count() - 1, chunk + (e.depth() - 1));
}

void Submission::State::enqueue_h2d_through(std::size_t last) {
  for (; h2d_enqueued <= last; ++h2d_enqueued) {
    try {
      enqueue_h2d(h2d_enqueued);
    } catch (const CudaError&) {
      fail(Failure::cuda, h2d_enqueued, "h2d", std::current_exception());
      throw;
    }
  }
}

void Submission::State::enqueue_chunk(std::size_t chunk, const char*& stage) {
  if (stages_in) {
    stage = "stage-in";
    submit_ready_stage_ins(chunk);
    if (next_stage_in <= chunk) {
      // Its pinned slot is still being read by the H2D of chunk - in_slots.
      const Event& slot_read = e.events[(chunk - e.in_slots()) % e.event_sets()].h2d_done;
      SLUICE_CUDA_CHECK(detail::poll_event(slot_read.get(), detail::PollPause::sleep));
      submit_stage_in(chunk);
    }
    wait_stage_in(chunk);
  }
  stage = "h2d";
  enqueue_h2d_through(last_h2d_with(chunk));
  stage = "compute";
  enqueue_compute(chunk);
  stage = "d2h";
  enqueue_d2h(chunk);
}

void Submission::State::run_driver() noexcept {
  std::size_t chunk = 0;
  const char* stage = "start";
  try {
    const DeviceScope scope(e.device);
    // Host staging reads the caller's memory, which work already on the
    // caller's stream may still be writing: the first chunk waits for it.
    if (caller && stages_in && plan.chunk_count() > 0) caller_ready.synchronize();
    for (; chunk < plan.chunk_count(); ++chunk) {
      {
        // Event sets and pinned stage-out slots are reused after the drain is done with them.
        std::unique_lock lock(mutex);
        progress.wait(lock, [&] {
          return failed ||
                 (drained + e.event_sets() > last_h2d_with(chunk) && (!stages_out || drained + e.out_slots() > chunk));
        });
        if (failed) break;
      }
      enqueue_chunk(chunk, stage);
      {
        std::lock_guard lock(mutex);
        enqueued = chunk + 1;
      }
      progress.notify_all();
    }
    if (!has_failed()) {
      stage = "finish";
      finish_event.record(e.d2h);
      if (caller) caller->wait(finish_event);
    }
  } catch (const CudaError&) {
    fail(Failure::cuda, std::min(chunk, plan.chunk_count() - 1), stage, std::current_exception());
  } catch (...) {
    fail(Failure::callback, std::min(chunk, plan.chunk_count() - 1), stage, std::current_exception());
  }
  driver_finished.store(true, std::memory_order_release);
}

void Submission::State::run_inline() noexcept {
  std::size_t chunk = 0;
  const char* stage = "start";
  try {
    const DeviceScope scope(e.device);
    for (; chunk < plan.chunk_count(); ++chunk) {
      // An event set is reused once its chunk is finished.
      while (drained + e.event_sets() <= last_h2d_with(chunk)) {
        stage = "wait";
        wait_chunk_done(drained);
        mark_drained(drained);
      }
      enqueue_chunk(chunk, stage);
      enqueued = chunk + 1;
    }
    stage = "finish";
    finish_event.record(e.d2h);
    if (caller) caller->wait(finish_event);
    while (drained < plan.chunk_count()) {
      wait_chunk_done(drained);
      mark_drained(drained);
    }
    host_end_ms = host_ms(Clock::now());
  } catch (const CudaError&) {
    if (!has_failed()) fail(Failure::cuda, std::min(chunk, plan.chunk_count() - 1), stage, std::current_exception());
  } catch (...) {
    if (!has_failed()) fail(Failure::callback, std::min(chunk, plan.chunk_count() - 1), stage, std::current_exception());
  }
  driver_finished.store(true, std::memory_order_release);
  drain_finished.store(true, std::memory_order_release);
}

void Submission::State::await_drained() {
  {
    std::unique_lock lock(mutex);
    progress.wait(lock, [&] { return failed || drained + 1 >= plan.chunk_count(); });
  }
  // The last chunk is moments away: poll, rather than sleep and wake late.
  while (!drain_finished.load(std::memory_order_acquire) || !driver_finished.load(std::memory_order_acquire))
    std::this_thread::yield();
}

// ---------------------------------------------------------------------------
// Drain

void Submission::State::wait_chunk_done(std::size_t chunk) {
  const Event& done = e.events[chunk % e.event_sets()].d2h_done;
  // Sleeping between queries leaves the core to the staging threads; at the
  // end of the run the wait only yields, so the run ends when its last copy
  // does. (Spinning through the whole of a pinned run measured no faster.)
  const cudaError_t code =
      detail::poll_event(done.get(), chunk < poll_from ? detail::PollPause::sleep : detail::PollPause::yield);
  if (code == cudaSuccess) return;
  (void)cudaGetLastError();
  if (is_sticky_error(code)) {
    // Every earlier chunk was seen complete, so the fault is in this chunk's
    // work or a later one's already running; the kernels are the likely cause.
    fail(Failure::cuda, chunk, "compute",
         std::make_exception_ptr(CudaError(CudaError(code, "a kernel launched by the compute callable", __FILE__, __LINE__),
                                           "at or after this chunk; every chunk before it had completed")));
  } else {
    fail(Failure::cuda, chunk, "d2h",
         std::make_exception_ptr(CudaError(code, "cudaEventQuery (chunk done)", __FILE__, __LINE__)));
  }
  throw std::runtime_error("chunk failed");
}

void Submission::State::record_device_intervals(std::size_t chunk) {
  const detail::ChunkEvents& ev = e.events[chunk % e.event_sets()];
  const ItemRange range = plan.chunk(chunk);
  auto at = [&](const Event& event) { return static_cast<double>(elapsed_ms(origin, event)); };
  std::size_t in_bytes = 0, out_bytes = 0;
  for (const auto& s : e.spans) {
    if (s.copied_in()) in_bytes += range.size() * s.item_bytes;
    if (s.copied_out()) out_bytes += range.size() * s.item_bytes;
  }
  const int stream = static_cast<int>(chunk % e.compute.size());
  drain_intervals.push_back({Lane::h2d, chunk, at(ev.h2d_start), at(ev.h2d_done), in_bytes, 0});
  drain_intervals.push_back({Lane::compute, chunk, at(ev.compute_start), at(ev.compute_done), 0, stream});
  drain_intervals.push_back({Lane::d2h, chunk, at(ev.d2h_start), at(ev.d2h_done), out_bytes, 0});
}

// Chunk by chunk, in order: a chunk's outputs start only after the previous
// chunk's are complete, so a failure leaves nothing written past the last
// finished chunk.
void Submission::State::stage_out(std::size_t chunk) {
  const ItemRange range = plan.chunk(chunk);
  const std::size_t ring = chunk % e.out_slots();
  const auto begin = Clock::now();
  std::vector<std::pair<std::size_t, StagingPool::Ticket>> jobs;
  std::size_t bytes_total = 0;
  for (std::size_t k = 0; k < e.spans.size(); ++k) {
    SpanRecord& s = e.spans[k];
    if (!s.copied_out() || !s.host_pass()) continue;
    const std::byte* pinned = e.pinned_out[k][ring].data();
    const std::size_t bytes = range.size() * s.item_bytes;
    bytes_total += bytes;
    if (s.path == HostPath::staged) {
      std::byte* to = s.at(range.begin);
      jobs.emplace_back(k, e.staging_pool().submit(
                               bytes, e.staging_pool().piece_bytes_for(bytes),
                               [to, pinned](std::size_t offset, std::size_t length) {
                                 detail::copy_streaming(to + offset, pinned + offset, length);
                               },
                               StagingPool::Priority::urgent));
    } else if (s.sink->splittable()) {
      Sink* sink = s.sink.get();
      const std::size_t item_bytes = s.item_bytes;
      jobs.emplace_back(k, e.staging_pool().submit(
                               bytes, item_piece_bytes(item_bytes),
                               [sink, pinned, range, item_bytes](std::size_t offset, std::size_t length) {
                                 const std::size_t first = range.begin + offset / item_bytes;
                                 sink->write({first, first + length / item_bytes}, {pinned + offset, length});
                               },
                               StagingPool::Priority::urgent));
    } else {
      Sink* sink = s.sink.get();
      jobs.emplace_back(k, e.staging_pool().submit(
                               std::max<std::size_t>(bytes, 1), std::max<std::size_t>(bytes, 1),
                               [sink, pinned, range, bytes](std::size_t, std::size_t) { sink->write(range, {pinned, bytes}); },
                               StagingPool::Priority::urgent));
    }
  }
  for (auto& [k, job] : jobs) {
    try {
      job->wait();
    } catch (const IoError&) {
      fail(Failure::io, chunk, "stage-out, " + e.spans[k].describe(k), std::current_exception());
    } catch (...) {
      fail(e.spans[k].path == HostPath::sink ? Failure::component : Failure::callback, chunk,
           "stage-out, " + e.spans[k].describe(k), std::current_exception());
    }
  }
  if (has_failed()) throw std::runtime_error("stage-out failed");
  if (e.options.record && !jobs.empty())
    drain_intervals.push_back({Lane::stage_out, chunk, host_ms(begin), host_ms(Clock::now()), bytes_total, 0});
}

void Submission::State::mark_drained(std::size_t chunk) {
  if (timed) record_device_intervals(chunk);
  std::lock_guard lock(mutex);
  drained = chunk + 1;
}

void Submission::State::run_drain() noexcept {
  std::size_t chunk = 0;
  try {
    const DeviceScope scope(e.device);
    for (; chunk < plan.chunk_count(); ++chunk) {
      {
        std::unique_lock lock(mutex);
        progress.wait(lock, [&] { return failed || enqueued > chunk; });
        if (failed) break;
      }
      wait_chunk_done(chunk);
      if (timed) record_device_intervals(chunk);
      if (stages_out) stage_out(chunk);
      if (e.done_fn) {
        try {
          e.done_fn(chunk, plan.chunk(chunk));
        } catch (...) {
          fail(Failure::callback, chunk, "chunk done", std::current_exception());
          break;
        }
      }
      {
        std::lock_guard lock(mutex);
        drained = chunk + 1;
        if (drained == plan.chunk_count()) host_end_ms = host_ms(Clock::now());
      }
      progress.notify_all();
    }
  } catch (const CudaError&) {
    fail(Failure::cuda, chunk, "drain", std::current_exception());
  } catch (...) {
    // Failures recorded where they happened; anything else is the drain's own.
    if (!has_failed()) fail(Failure::callback, chunk, "drain", std::current_exception());
  }
  // The last touch of this state: the waiter may destroy it as soon as it sees this.
  drain_finished.store(true, std::memory_order_release);
}

}  // namespace sluice
