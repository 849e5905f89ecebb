// The pipeline engine. Two sluice threads run each submission:
//  - the driver enqueues chunk after chunk (stage-in copy for pageable
//    inputs, H2D, compute, D2H). The GPU itself holds a chunk's H2D until
//    the D2H of the chunk `depth` earlier has freed its device slot, so the
//    driver runs ahead freely, up to the run-ahead ring (event sets and
//    pinned staging slots, more of them than device slots);
//  - the drain watches each chunk's stage events in order, copies pageable
//    outputs back to the caller's memory, reports the chunk done, and frees
//    its slot for the driver.
// The host blocks only where a pinned staging slot or event set must be reused.
// Both threads live as long as the pipeline: a run pays no thread creation.
#include "sluice/pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "sluice/device_buffer.hpp"
#include "sluice/error.hpp"
#include "sluice/event.hpp"
#include "sluice/event_timer.hpp"
#include "sluice/parallel_copy.hpp"
#include "sluice/pinned_buffer.hpp"
#include "sluice/pointer_query.hpp"
#include "sluice/stats.hpp"
#include "sluice/stream.hpp"
#include "sluice/worker_thread.hpp"
#include "core/nvtx_range.hpp"

namespace sluice {

namespace {

using Clock = std::chrono::steady_clock;

struct Span {
  std::byte* host = nullptr;
  std::size_t items = 0;
  std::size_t item_bytes = 0;
  Pipeline::Role role = Pipeline::Role::input;
  MemoryKind kind = MemoryKind::pageable;

  bool copied_in() const { return role != Pipeline::Role::output; }
  bool copied_out() const { return role != Pipeline::Role::input; }
  bool staged() const { return !is_page_locked_host(kind); }
  std::size_t bytes() const { return items * item_bytes; }
  std::byte* at(std::size_t item) const { return host + item * item_bytes; }
};

// The events that carry one slot's chunk from stage to stage.
struct SlotEvents {
  explicit SlotEvents(Event::Timing timing)
      : h2d_start(timing), h2d_done(timing), compute_start(timing), compute_done(timing), d2h_start(timing),
        d2h_done(timing) {}
  Event h2d_start, h2d_done, compute_start, compute_done, d2h_start, d2h_done;
};

std::string chunk_context(std::size_t chunk, ItemRange items, const char* stage) {
  return "chunk " + std::to_string(chunk) + " (items " + std::to_string(items.begin) + ".." +
         std::to_string(items.end) + "), stage " + stage;
}

// Errors raised by a kernel's execution, as opposed to a copy's.
bool is_kernel_fault(cudaError_t code) {
  switch (code) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorLaunchTimeout:
    case cudaErrorLaunchOutOfResources: return true;
    default: return false;
  }
}

bool ranges_overlap(const Span& a, const Span& b) {
  const std::byte* a_end = a.host + a.bytes();
  const std::byte* b_end = b.host + b.bytes();
  return a.bytes() > 0 && b.bytes() > 0 && a.host < b_end && b.host < a_end;
}

}  // namespace

// ---------------------------------------------------------------------------
struct Pipeline::Engine {
  // Options are fixed from here on, so they are checked once, here.
  explicit Engine(PipelineOptions o) : options(o), h2d(o.priority), d2h(o.priority) {
    if (o.depth == 0) throw std::invalid_argument("pipeline depth must be at least 1");
    if (o.compute_streams == 0) throw std::invalid_argument("compute_streams must be at least 1");
    for (unsigned i = 0; i < o.compute_streams; ++i) compute.emplace_back(o.priority);
    SLUICE_CUDA_CHECK(cudaGetDevice(&device));
  }

  PipelineOptions options;
  int device = 0;
  Stream h2d, d2h;
  std::vector<Stream> compute;
  std::vector<Span> spans;
  ComputeFn compute_fn;
  ChunkDoneFn done_fn;
  bool busy = false;

  // Resources, kept between runs of the same shape.
  std::size_t chunk_items = 0;
  std::vector<std::size_t> shape;  // item bytes per span, then chunk items, depth, timing
  std::vector<std::vector<DeviceBuffer<std::byte>>> slots;    // [slot][span]
  std::vector<std::vector<void*>> slot_pointers;              // [slot][span]
  std::vector<std::vector<PinnedBuffer<std::byte>>> staging;  // [chunk % run_ahead()][span], empty when not staged
  std::vector<SlotEvents> events;                             // [chunk % run_ahead()]
  std::unique_ptr<WorkerThread> driver_thread, drain_thread;
  std::unique_ptr<ParallelCopier> copy_in, copy_out;

  std::size_t depth() const { return options.depth; }
  // Chunks the driver may be ahead of the drain: pinned staging slots and
  // event sets come in this number, so staging never waits on a device slot.
  std::size_t run_ahead() const { return 2 * options.depth + 2; }

  void validate() {
    if (spans.empty()) throw std::invalid_argument("pipeline has no spans: add at least one input or output");
    if (!compute_fn) throw std::invalid_argument("pipeline has no compute callable");
    const std::size_t items = spans.front().items;
    for (std::size_t k = 0; k < spans.size(); ++k) {
      const Span& s = spans[k];
      if (s.items != items)
        throw std::invalid_argument("span " + std::to_string(k) + " has " + std::to_string(s.items) +
                                    " items but span 0 has " + std::to_string(items) + ": all spans must match");
      if (s.host == nullptr && s.items > 0) throw std::invalid_argument("span " + std::to_string(k) + " is null");
    }
    for (std::size_t i = 0; i < spans.size(); ++i)
      for (std::size_t j = i + 1; j < spans.size(); ++j) {
        const bool either_written = spans[i].copied_out() || spans[j].copied_out();
        if (either_written && ranges_overlap(spans[i], spans[j]))
          throw std::invalid_argument("spans " + std::to_string(i) + " and " + std::to_string(j) +
                                      " overlap and one is written: use inout() for an in-place transform");
      }
  }

  std::size_t widest_item() const {
    std::size_t widest = 0;
    for (const auto& s : spans) widest = std::max(widest, s.item_bytes);
    return widest;
  }

  // Classifies spans and (re)allocates the ring when the shape changed.
  void prepare() {
    for (auto& s : spans) s.kind = s.items == 0 ? MemoryKind::pinned : memory_kind(s.host, s.bytes());
    for (std::size_t k = 0; k < spans.size(); ++k)
      if (spans[k].kind == MemoryKind::device || spans[k].kind == MemoryKind::managed)
        throw std::invalid_argument("span " + std::to_string(k) + " is " + std::string(to_string(spans[k].kind)) +
                                    " memory: the pipeline streams host memory");
    const std::size_t items = spans.front().items;
    chunk_items = options.chunk_items > 0 ? options.chunk_items : default_chunk_items(items, widest_item());
    chunk_items = std::max<std::size_t>(1, std::min(chunk_items, items));  // a slot never needs more than all items

    std::vector<std::size_t> wanted;
    for (const auto& s : spans) wanted.push_back(s.item_bytes);
    wanted.push_back(chunk_items);
    wanted.push_back(options.depth);
    wanted.push_back(options.record ? 1 : 0);
    if (wanted != shape) allocate(wanted);
    // Staging appears only for spans that are pageable in this run.
    for (std::size_t slot = 0; slot < run_ahead(); ++slot)
      for (std::size_t k = 0; k < spans.size(); ++k)
        if (spans[k].staged() && staging[slot][k].empty())
          staging[slot][k] = PinnedBuffer<std::byte>(chunk_items * spans[k].item_bytes);
    if (!copy_in) {
      // Both directions staged at once share the cores; one alone gets them all.
      bool stage_in = false, stage_out = false;
      for (const auto& s : spans) {
        stage_in |= s.staged() && s.copied_in();
        stage_out |= s.staged() && s.copied_out();
      }
      unsigned threads = options.staging_threads;
      if (threads == 0) threads = std::max(1u, ParallelCopier::default_thread_count() / (stage_in && stage_out ? 2 : 1));
      copy_in = std::make_unique<ParallelCopier>(threads);
      copy_out = std::make_unique<ParallelCopier>(threads);
    }
  }

  void allocate(const std::vector<std::size_t>& wanted) {
    slots.clear();
    slot_pointers.clear();
    staging.clear();
    events.clear();
    shape.clear();
    h2d.synchronize();  // frees of the old ring complete before the new one is sized

    std::size_t ring_bytes = 0;
    for (const auto& s : spans) ring_bytes += depth() * chunk_items * s.item_bytes;
    std::size_t free_bytes = 0, total_bytes = 0;
    SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (ring_bytes > free_bytes)
      throw std::invalid_argument("pipeline needs " + std::to_string(ring_bytes) + " bytes of device memory (" +
                                  std::to_string(depth()) + " slots x " + std::to_string(chunk_items) +
                                  " items x all spans) but only " + std::to_string(free_bytes) +
                                  " are free: use a smaller chunk or depth");

    const auto timing = options.record ? Event::Timing::enabled : Event::Timing::disabled;
    for (std::size_t slot = 0; slot < depth(); ++slot) {
      auto& row = slots.emplace_back();
      auto& pointers = slot_pointers.emplace_back();
      for (const auto& s : spans) {
        row.emplace_back(chunk_items * s.item_bytes, h2d.view());
        pointers.push_back(row.back().data());
      }
    }
    for (std::size_t set = 0; set < run_ahead(); ++set) {
      events.emplace_back(timing);
      staging.emplace_back(spans.size());
    }
    h2d.synchronize();
    shape = wanted;
  }
};

// ---------------------------------------------------------------------------
struct Submission::State {
  Pipeline::Engine& engine;
  ChunkPlan plan;
  std::mutex mutex;
  std::condition_variable progress;
  std::size_t enqueued = 0;  // chunks the driver has put on the streams
  std::size_t drained = 0;   // chunks whose outputs are in host memory
  bool failed = false;
  std::exception_ptr error;
  Event origin{Event::Timing::enabled}, finish{Event::Timing::enabled};
  Clock::time_point host_origin;
  double host_end_ms = 0;
  std::vector<StageInterval> driver_intervals, drain_intervals;

  State(Pipeline::Engine& e, std::size_t items) : engine(e), plan(items, e.chunk_items) {}

  double host_ms(Clock::time_point t) const { return std::chrono::duration<double, std::milli>(t - host_origin).count(); }

  void fail(std::exception_ptr e) {
    {
      std::lock_guard lock(mutex);
      if (!failed) error = e;
      failed = true;
    }
    progress.notify_all();
  }

  // Runs a stage step, naming chunk and stage in any CUDA error it raises.
  template <typename Step>
  void stage(std::size_t chunk, const char* name, Step step) {
    try {
      const detail::NvtxRange range(name, chunk);
      step();
    } catch (const CudaError& e) {
      throw CudaError(e, chunk_context(chunk, plan.chunk(chunk), name));
    }
  }

  void run_driver();
  void run_drain();
  void wait_for_event(const Event& event, std::size_t chunk, const char* name, std::size_t& compute_seen);
  RunReport finish_report();
};

void Submission::State::run_driver() {
  auto& e = engine;
  try {
    SLUICE_CUDA_CHECK(cudaSetDevice(e.device));
    for (std::size_t c = 0; c < plan.chunk_count(); ++c) {
      // Chunk c reuses the event set and staging slots of chunk c - run_ahead:
      // the drain must be done with that one (its staged output copied out).
      {
        std::unique_lock lock(mutex);
        progress.wait(lock, [&] { return failed || drained + e.run_ahead() > c; });
        if (failed) return;
      }
      const std::size_t slot = c % e.depth();
      const std::size_t ahead = c % e.run_ahead();
      const ItemRange range = plan.chunk(c);
      SlotEvents& ev = e.events[ahead];
      // The chunk that last used this device slot, whose D2H frees it.
      const SlotEvents* previous = c >= e.depth() ? &e.events[(c - e.depth()) % e.run_ahead()] : nullptr;

      for (std::size_t k = 0; k < e.spans.size(); ++k) {
        const Span& s = e.spans[k];
        if (!s.copied_in() || !s.staged()) continue;
        const detail::NvtxRange nvtx("stage-in", c);
        const auto begin = Clock::now();
        e.copy_in->copy(e.staging[ahead][k].data(), s.at(range.begin), range.size() * s.item_bytes);
        if (e.options.record)
          driver_intervals.push_back({Lane::stage_in, c, host_ms(begin), host_ms(Clock::now()),
                                      range.size() * s.item_bytes, 0});
      }

      stage(c, "h2d", [&] {
        if (previous) e.h2d.wait(previous->d2h_done);
        if (e.options.record) ev.h2d_start.record(e.h2d);
        for (std::size_t k = 0; k < e.spans.size(); ++k) {
          const Span& s = e.spans[k];
          if (!s.copied_in()) continue;
          const void* src = s.staged() ? static_cast<const void*>(e.staging[ahead][k].data()) : s.at(range.begin);
          SLUICE_CUDA_CHECK(cudaMemcpyAsync(e.slot_pointers[slot][k], src, range.size() * s.item_bytes,
                                            cudaMemcpyHostToDevice, e.h2d.get()));
        }
        ev.h2d_done.record(e.h2d);
      });

      Stream& compute = e.compute[c % e.compute.size()];
      stage(c, "compute", [&] {
        compute.wait(ev.h2d_done);
        if (e.options.record) ev.compute_start.record(compute);
        e.compute_fn(Chunk{c, range, compute.view(), e.slot_pointers[slot]});
        SLUICE_CUDA_CHECK(cudaGetLastError());  // a bad launch configuration shows here
        ev.compute_done.record(compute);
      });

      stage(c, "d2h", [&] {
        e.d2h.wait(ev.compute_done);
        if (e.options.record) ev.d2h_start.record(e.d2h);
        for (std::size_t k = 0; k < e.spans.size(); ++k) {
          const Span& s = e.spans[k];
          if (!s.copied_out()) continue;
          void* dst = s.staged() ? static_cast<void*>(e.staging[ahead][k].data()) : s.at(range.begin);
          SLUICE_CUDA_CHECK(cudaMemcpyAsync(dst, e.slot_pointers[slot][k], range.size() * s.item_bytes,
                                            cudaMemcpyDeviceToHost, e.d2h.get()));
        }
        ev.d2h_done.record(e.d2h);
      });

      {
        std::lock_guard lock(mutex);
        enqueued = c + 1;
      }
      progress.notify_all();
    }
    finish.record(e.d2h);
  } catch (...) {
    fail(std::current_exception());
  }
}

// Polls rather than blocks, so that a CUDA failure is seen at the first stage
// that did not complete, and so a failure elsewhere stops the wait.
void Submission::State::wait_for_event(const Event& event, std::size_t chunk, const char* name,
                                       std::size_t& compute_seen) {
  int idle_polls = 0;
  for (;;) {
    const cudaError_t code = cudaEventQuery(event.get());
    if (code == cudaSuccess) return;
    if (code != cudaErrorNotReady) {
      (void)cudaGetLastError();
      // A faulting kernel poisons every later query: blame the first compute
      // not yet seen complete rather than the event that happened to be asked.
      if (is_kernel_fault(code)) {
        const std::size_t culprit = std::min(compute_seen, plan.chunk_count() - 1);
        throw CudaError(CudaError(code, "a kernel launched by the compute callable", __FILE__, __LINE__),
                        chunk_context(culprit, plan.chunk(culprit), "compute"));
      }
      throw CudaError(CudaError(code, "cudaEventQuery", __FILE__, __LINE__), chunk_context(chunk, plan.chunk(chunk), name));
    }
    std::size_t in_flight = 0;
    {
      std::lock_guard lock(mutex);
      if (failed) throw std::runtime_error("stopped: another stage failed");
      in_flight = enqueued;
    }
    // Keep the compute cursor fresh while waiting.
    while (compute_seen < in_flight &&
           cudaEventQuery(engine.events[compute_seen % engine.run_ahead()].compute_done.get()) == cudaSuccess)
      ++compute_seen;
    if (++idle_polls < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void Submission::State::run_drain() {
  auto& e = engine;
  std::size_t compute_seen = 0;
  try {
    SLUICE_CUDA_CHECK(cudaSetDevice(e.device));
    for (std::size_t c = 0; c < plan.chunk_count(); ++c) {
      {
        std::unique_lock lock(mutex);
        progress.wait(lock, [&] { return failed || enqueued > c; });
        if (failed) return;
      }
      const std::size_t ahead = c % e.run_ahead();
      const ItemRange range = plan.chunk(c);
      SlotEvents& ev = e.events[ahead];
      wait_for_event(ev.h2d_done, c, "h2d", compute_seen);
      wait_for_event(ev.compute_done, c, "compute", compute_seen);
      compute_seen = std::max(compute_seen, c + 1);
      wait_for_event(ev.d2h_done, c, "d2h", compute_seen);

      if (e.options.record) {
        auto at = [&](const Event& event) { return static_cast<double>(elapsed_ms(origin, event)); };
        std::size_t in_bytes = 0, out_bytes = 0;
        for (const auto& s : e.spans) {
          if (s.copied_in()) in_bytes += range.size() * s.item_bytes;
          if (s.copied_out()) out_bytes += range.size() * s.item_bytes;
        }
        const int stream = static_cast<int>(c % e.compute.size());
        drain_intervals.push_back({Lane::h2d, c, at(ev.h2d_start), at(ev.h2d_done), in_bytes, 0});
        drain_intervals.push_back({Lane::compute, c, at(ev.compute_start), at(ev.compute_done), 0, stream});
        drain_intervals.push_back({Lane::d2h, c, at(ev.d2h_start), at(ev.d2h_done), out_bytes, 0});
      }

      for (std::size_t k = 0; k < e.spans.size(); ++k) {
        const Span& s = e.spans[k];
        if (!s.copied_out() || !s.staged()) continue;
        const detail::NvtxRange nvtx("stage-out", c);
        const auto begin = Clock::now();
        e.copy_out->copy(s.at(range.begin), e.staging[ahead][k].data(), range.size() * s.item_bytes);
        if (e.options.record)
          drain_intervals.push_back({Lane::stage_out, c, host_ms(begin), host_ms(Clock::now()),
                                     range.size() * s.item_bytes, 0});
      }
      if (e.done_fn) e.done_fn(c, range);
      {
        std::lock_guard lock(mutex);
        drained = c + 1;
        if (drained == plan.chunk_count()) host_end_ms = host_ms(Clock::now());
      }
      progress.notify_all();
    }
  } catch (...) {
    fail(std::current_exception());
  }
}

RunReport Submission::State::finish_report() {
  auto& e = engine;
  RunReport report;
  report.item_count = plan.item_count();
  report.chunk_items = plan.chunk_items();
  report.chunk_count = plan.chunk_count();
  report.depth = e.depth();
  for (const auto& s : e.spans) {
    if (s.copied_in()) report.h2d_bytes += static_cast<double>(s.bytes());
    if (s.copied_out()) report.d2h_bytes += static_cast<double>(s.bytes());
  }
  // Device work ends at `finish`; staged outputs land on the host a little later.
  const double device_ms = plan.chunk_count() > 0 ? elapsed_ms(origin, finish) : 0.0;
  report.wall_ms = std::max(device_ms, host_end_ms);
  report.intervals = std::move(driver_intervals);
  report.intervals.insert(report.intervals.end(), drain_intervals.begin(), drain_intervals.end());
  std::sort(report.intervals.begin(), report.intervals.end(),
            [](const StageInterval& a, const StageInterval& b) { return a.start_ms < b.start_ms; });
  return report;
}

Submission::Submission(std::unique_ptr<State> state) : state_(std::move(state)) {}
Submission::Submission(Submission&&) noexcept = default;
Submission& Submission::operator=(Submission&& other) noexcept {
  if (this != &other) {
    if (state_) {
      try {
        wait();
      } catch (...) {
      }
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

Submission::~Submission() {
  if (!state_) return;
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: a pipeline run that nobody waited for failed: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "sluice: a pipeline run that nobody waited for failed\n");
  }
}

RunReport Submission::wait() {
  if (!state_) throw std::logic_error("Submission::wait on an empty or already waited submission");
  std::unique_ptr<State> state = std::move(state_);
  auto& e = state->engine;
  e.driver_thread->wait_idle();
  e.drain_thread->wait_idle();
  // Nothing of this run may still touch the ring when the next one starts,
  // failed or not. After a sticky error these return it again; it is already known.
  const cudaError_t h2d = cudaStreamSynchronize(e.h2d.get());
  const cudaError_t d2h = cudaStreamSynchronize(e.d2h.get());
  cudaError_t compute = cudaSuccess;
  for (auto& s : e.compute) compute = compute != cudaSuccess ? compute : cudaStreamSynchronize(s.get());
  e.busy = false;
  if (state->error) {
    (void)cudaGetLastError();
    std::rethrow_exception(state->error);
  }
  SLUICE_CUDA_CHECK(h2d);
  SLUICE_CUDA_CHECK(d2h);
  SLUICE_CUDA_CHECK(compute);
  return state->finish_report();
}

// ---------------------------------------------------------------------------
Pipeline::Pipeline(PipelineOptions options) : engine_(std::make_unique<Engine>(options)) {}
Pipeline::~Pipeline() = default;
Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;

const PipelineOptions& Pipeline::options() const { return engine_->options; }

Pipeline& Pipeline::add_span(const void* data, std::size_t items, std::size_t item_bytes, Role role) {
  if (engine_->busy) throw std::logic_error("cannot change spans while a run is in flight");
  engine_->spans.push_back(Span{static_cast<std::byte*>(const_cast<void*>(data)), items, item_bytes, role});
  return *this;
}

Pipeline& Pipeline::compute(ComputeFn fn) {
  engine_->compute_fn = std::move(fn);
  return *this;
}

Pipeline& Pipeline::on_chunk_done(ChunkDoneFn fn) {
  engine_->done_fn = std::move(fn);
  return *this;
}

Pipeline& Pipeline::clear_spans() {
  if (engine_->busy) throw std::logic_error("cannot change spans while a run is in flight");
  engine_->spans.clear();
  return *this;
}

Submission Pipeline::start(bool drive_on_caller) {
  Engine& e = *engine_;
  if (e.busy) throw std::logic_error("this pipeline is already running; wait for it or use a second pipeline");
  e.validate();
  SLUICE_CUDA_CHECK(cudaSetDevice(e.device));
  e.prepare();
  auto state = std::make_unique<Submission::State>(e, e.spans.front().items);
  state->origin.record(e.h2d);
  state->origin.synchronize();
  state->host_origin = Clock::now();
  e.busy = true;
  if (!e.driver_thread) {
    e.driver_thread = std::make_unique<WorkerThread>();
    e.drain_thread = std::make_unique<WorkerThread>();
  }
  Submission::State* raw = state.get();
  e.drain_thread->post([raw] { raw->run_drain(); });
  if (drive_on_caller)
    raw->run_driver();  // catches everything itself; saves a thread hand-off
  else
    e.driver_thread->post([raw] { raw->run_driver(); });
  return Submission(std::move(state));
}

Submission Pipeline::submit() { return start(false); }

RunReport Pipeline::run() {
  int caller_device = 0;
  SLUICE_CUDA_CHECK(cudaGetDevice(&caller_device));
  Submission submission = start(true);
  SLUICE_CUDA_CHECK(cudaSetDevice(caller_device));
  return submission.wait();
}

StageCosts Pipeline::measure_stage_costs(int repeats) {
  Engine& e = *engine_;
  if (e.busy) throw std::logic_error("cannot measure stage costs while a run is in flight");
  if (repeats < 1) throw std::invalid_argument("repeats must be at least 1");
  e.validate();
  SLUICE_CUDA_CHECK(cudaSetDevice(e.device));
  e.prepare();
  const ChunkPlan plan(e.spans.front().items, e.chunk_items);

  // Pinned scratch of one chunk per span: the copy engines run at their
  // page-locked speed whatever the caller's memory is, and the caller's
  // outputs are left alone.
  std::vector<PinnedBuffer<std::byte>> scratch;
  StageCosts costs;
  for (const auto& s : e.spans) {
    scratch.emplace_back(e.chunk_items * s.item_bytes);
    if (s.copied_in()) costs.h2d_bytes += static_cast<double>(s.bytes());
    if (s.copied_out()) costs.d2h_bytes += static_cast<double>(s.bytes());
  }
  auto copies = [&](bool in, StreamView stream) {
    for (std::size_t c = 0; c < plan.chunk_count(); ++c) {
      const ItemRange range = plan.chunk(c);
      for (std::size_t k = 0; k < e.spans.size(); ++k) {
        const Span& s = e.spans[k];
        if (in ? !s.copied_in() : !s.copied_out()) continue;
        void* slot = e.slot_pointers[c % e.depth()][k];
        const std::size_t bytes = range.size() * s.item_bytes;
        if (in)
          SLUICE_CUDA_CHECK(cudaMemcpyAsync(slot, scratch[k].data(), bytes, cudaMemcpyHostToDevice, stream.get()));
        else
          SLUICE_CUDA_CHECK(cudaMemcpyAsync(scratch[k].data(), slot, bytes, cudaMemcpyDeviceToHost, stream.get()));
      }
    }
  };
  // The bound is what each engine can do alone: the fastest repeat, so that
  // noise in one repeat cannot lower the bar the pipeline is held to.
  auto fastest = [](const std::vector<double>& samples) { return summarize(samples).min; };
  Event fork, join;

  costs.h2d_ms = fastest(time_with_events(e.h2d, 1, repeats, [&](StreamView s) { copies(true, s); }));
  costs.d2h_ms = fastest(time_with_events(e.d2h, 1, repeats, [&](StreamView s) { copies(false, s); }));
  // Compute alone, issued as the pipeline issues it: chunks taking turns over the compute streams.
  std::vector<Event> joins(e.compute.size());
  costs.kernel_ms = fastest(time_with_events(e.h2d, 1, repeats, [&](StreamView s) {
    fork.record(s);
    for (auto& stream : e.compute) stream.wait(fork);
    for (std::size_t c = 0; c < plan.chunk_count(); ++c) {
      e.compute_fn(Chunk{c, plan.chunk(c), e.compute[c % e.compute.size()].view(), e.slot_pointers[c % e.depth()]});
      SLUICE_CUDA_CHECK(cudaGetLastError());
    }
    for (std::size_t k = 0; k < e.compute.size(); ++k) {
      joins[k].record(e.compute[k]);
      s.wait(joins[k]);
    }
  }));
  if (costs.h2d_bytes > 0 && costs.d2h_bytes > 0) {
    const double both_ms = fastest(time_with_events(e.h2d, 1, repeats, [&](StreamView s) {
      fork.record(s);
      e.d2h.wait(fork);
      copies(true, s);
      copies(false, e.d2h);
      join.record(e.d2h);
      s.wait(join);
    }));
    costs.bidirectional_gbps = gb_per_s(costs.h2d_bytes + costs.d2h_bytes, both_ms);
  }
  return costs;
}

}  // namespace sluice
