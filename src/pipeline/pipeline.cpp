// The public Pipeline and Submission: checks, ownership, and starting runs.
#include <atomic>
#include <cstdio>
#include <stdexcept>

#include "core/event_poll.hpp"
#include "run_state.hpp"
#include "sluice/device_scope.hpp"
#include "sluice/error.hpp"

namespace sluice {

std::uint64_t detail::new_span_generation() {
  static std::atomic<std::uint64_t> counter{0};
  return ++counter;
}

namespace {

void refuse_while_running(const Pipeline::Engine& e, const char* what) {
  if (e.busy) throw std::logic_error(std::string("cannot ") + what + " while a run is in flight");
}

}  // namespace

// ---------------------------------------------------------------------------
void detail::ChunkGate::reset(std::size_t first) {
  std::lock_guard lock(mutex_);
  next_ = first;
  closed_ = false;
}

void detail::ChunkGate::enter(std::size_t chunk) {
  std::unique_lock lock(mutex_);
  turn_.wait(lock, [&] { return closed_ || next_ == chunk; });
  if (closed_) throw std::runtime_error("stopped: an earlier chunk failed");
}

void detail::ChunkGate::leave() {
  {
    std::lock_guard lock(mutex_);
    ++next_;
  }
  turn_.notify_all();
}

void detail::ChunkGate::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  turn_.notify_all();
}

// ---------------------------------------------------------------------------
namespace {
int resolve_device(const PipelineOptions& o) {
  if (o.depth == 0) throw std::invalid_argument("pipeline depth must be at least 1");
  compute_stream_count(o);  // refuses more streams than the kernel order allows
  if (!o.device) {
    int current = 0;
    SLUICE_CUDA_CHECK(cudaGetDevice(&current));
    return current;
  }
  int count = 0;
  SLUICE_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (*o.device < 0 || *o.device >= count)
    throw std::invalid_argument("device " + std::to_string(*o.device) + " does not exist (" + std::to_string(count) +
                                " device(s) present)");
  return *o.device;
}

// Streams belong to the device current when they are made.
Stream stream_on(int device, int priority) {
  const DeviceScope scope(device);
  return Stream(priority);
}
}  // namespace

Pipeline::Engine::Engine(PipelineOptions o)
    : options(o), device(resolve_device(o)), h2d(stream_on(device, o.priority)), d2h(stream_on(device, o.priority)) {
  for (unsigned i = 0; i < compute_stream_count(o); ++i) compute.push_back(stream_on(device, o.priority));
  generation = detail::new_span_generation();
}

Pipeline::Engine::~Engine() {
  // The worker threads first: nothing may run while what it uses is freed.
  driver_thread.reset();
  drain_thread.reset();
  try {
    const DeviceScope scope(device);
    spans.clear();  // waits for background registrations, then undoes them
    registrar.reset();
    pool.reset();
    events.clear();
    pinned_in.clear();
    pinned_out.clear();
    device_slots.clear();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: releasing a pipeline: %s\n", e.what());
  }
}

// ---------------------------------------------------------------------------
Pipeline::Pipeline(PipelineOptions options) : engine_(std::make_shared<Engine>(options)) {}
Pipeline::~Pipeline() = default;
Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;

const PipelineOptions& Pipeline::options() const {
  if (!engine_) throw std::logic_error("use of a moved-from Pipeline");
  return engine_->options;
}

int Pipeline::device() const {
  if (!engine_) throw std::logic_error("use of a moved-from Pipeline");
  return engine_->device;
}

std::uint64_t Pipeline::generation() const { return engine_->generation; }

namespace {
Pipeline::Engine& usable(const std::shared_ptr<Pipeline::Engine>& engine, const char* what) {
  if (!engine) throw std::logic_error("use of a moved-from Pipeline");
  refuse_while_running(*engine, what);
  return *engine;
}

void refuse_after_run(const Pipeline::Engine& e) {
  if (e.ran)
    throw std::logic_error(
        "spans are added before the first run: rebind() a span to other memory, or clear_spans() and add them anew "
        "(with a new compute callable)");
}
}  // namespace

std::size_t Pipeline::add_host(const void* data, std::size_t items, std::size_t item_bytes, SpanRole role) {
  Engine& e = usable(engine_, "add spans");
  refuse_after_run(e);
  if (item_bytes == 0) throw std::invalid_argument("span items must be at least 1 byte");
  detail::SpanRecord span;
  span.role = role;
  span.item_bytes = item_bytes;
  span.items = items;
  span.host = static_cast<std::byte*>(const_cast<void*>(data));
  e.spans.push_back(std::move(span));
  e.gates.push_back(std::make_unique<detail::ChunkGate>());
  return e.spans.size() - 1;
}

std::size_t Pipeline::add_source(std::shared_ptr<Source> source, std::size_t item_bytes) {
  Engine& e = usable(engine_, "add spans");
  refuse_after_run(e);
  if (!source) throw std::invalid_argument("input(): the source is null");
  if (source->item_bytes() != item_bytes)
    throw std::invalid_argument("input(): " + source->name() + " has items of " + std::to_string(source->item_bytes()) +
                                " bytes, but the handle's type has " + std::to_string(item_bytes));
  detail::SpanRecord span;
  span.role = SpanRole::input;
  span.item_bytes = item_bytes;
  span.items = source->item_count();
  span.source = std::move(source);
  e.spans.push_back(std::move(span));
  e.gates.push_back(std::make_unique<detail::ChunkGate>());
  return e.spans.size() - 1;
}

std::size_t Pipeline::add_sink(std::shared_ptr<Sink> sink, std::size_t item_bytes) {
  Engine& e = usable(engine_, "add spans");
  refuse_after_run(e);
  if (!sink) throw std::invalid_argument("output(): the sink is null");
  if (sink->item_bytes() != item_bytes)
    throw std::invalid_argument("output(): " + sink->name() + " takes items of " + std::to_string(sink->item_bytes()) +
                                " bytes, but the handle's type has " + std::to_string(item_bytes));
  detail::SpanRecord span;
  span.role = SpanRole::output;
  span.item_bytes = item_bytes;
  span.items = sink->item_count();
  span.sink = std::move(sink);
  e.spans.push_back(std::move(span));
  e.gates.push_back(std::make_unique<detail::ChunkGate>());
  return e.spans.size() - 1;
}

void Pipeline::rebind_host(std::size_t index, std::uint64_t generation, const void* data, std::size_t items,
                           bool writable) {
  Engine& e = usable(engine_, "rebind a span");
  if (generation != e.generation || index >= e.spans.size())
    throw std::logic_error("rebind(): the handle belongs to another pipeline, or to spans cleared since it was made");
  detail::SpanRecord& span = e.spans[index];
  if (span.source || span.sink) throw std::logic_error("rebind(): " + span.describe(index) + " is not host memory");
  if (span.copied_out() && !writable) throw std::logic_error("rebind(): " + span.describe(index) + " needs writable memory");
  span.registration.reset();  // the old memory is no longer the pipeline's to keep locked
  span.host = static_cast<std::byte*>(const_cast<void*>(data));
  span.items = items;
  span.runs = 0;
}

void Pipeline::rebind_host(std::size_t span, const void* data, std::size_t items) {
  if (!engine_) throw std::logic_error("use of a moved-from Pipeline");
  rebind_host(span, engine_->generation, data, items, true);
}

Pipeline& Pipeline::compute(ComputeFn fn) {
  usable(engine_, "replace the compute callable").compute_fn = std::move(fn);
  return *this;
}

Pipeline& Pipeline::on_chunk_done(ChunkDoneFn fn) {
  usable(engine_, "replace the chunk-done callable").done_fn = std::move(fn);
  return *this;
}

Pipeline& Pipeline::clear_spans() {
  Engine& e = usable(engine_, "clear spans");
  e.spans.clear();  // joins background registrations and unregisters
  e.gates.clear();
  e.compute_fn = nullptr;
  e.generation = detail::new_span_generation();
  e.ran = false;
  e.slots_filled = false;
  return *this;
}

Submission Pipeline::start(std::optional<StreamView> caller, StartMode mode) {
  if (!engine_) throw std::logic_error("use of a moved-from Pipeline");
  Engine& e = *engine_;
  bool idle = false;
  if (!e.busy.compare_exchange_strong(idle, true))
    throw std::logic_error("this pipeline is already running; wait for it or use a second pipeline");
  std::unique_ptr<Submission::State> state;
  std::vector<Sink*> begun;  // sinks whose run has begun: abandoned if the run does not start
  try {
    const DeviceScope scope(e.device);
    e.validate();
    std::vector<std::string> notes;
    e.classify_spans(notes);
    ChunkPlan plan = e.plan_chunks(e.spans.front().items);
    const Engine::Allocated allocated = e.prepare(plan.chunk_items());
    // Sources first: they change nothing, so a source that refuses leaves no sink to undo.
    for (auto& s : e.spans)
      if (s.source) s.source->begin_run();
    for (auto& s : e.spans)
      if (s.sink) {
        s.sink->begin_run();
        begun.push_back(s.sink.get());
      }
    for (auto& gate : e.gates) gate->reset(0);
    e.last_plan = plan;
    state = std::make_unique<Submission::State>(engine_, std::move(plan), caller);
    state->notes = std::move(notes);
    state->allocated_device = allocated.device;
    state->allocated_pinned = allocated.pinned;
    if (caller) state->caller_ready.record(*caller);
    state->origin.record(e.h2d);
    // Host intervals are drawn beside device ones only when recording: only
    // then is it worth aligning the two clocks by waiting for the origin.
    if (e.options.record) state->origin.synchronize();
    state->host_origin = Submission::State::Clock::now();
    state->inline_drain =
        mode == StartMode::finish_on_caller && !state->stages_in && !state->stages_out && !e.done_fn;
    if (!state->inline_drain) {
      if (!e.drain_thread) e.drain_thread = std::make_unique<WorkerThread>();
      e.drain_thread->wait_idle();  // the last run's task may still be returning
    }
    if (mode == StartMode::worker) {
      if (!e.driver_thread) e.driver_thread = std::make_unique<WorkerThread>();
      e.driver_thread->wait_idle();
    }
    e.ran = true;
  } catch (...) {
    for (Sink* sink : begun) sink->abandon(0);
    e.busy = false;
    throw;
  }
  Submission::State* raw = state.get();
  if (state->inline_drain) {
    raw->run_inline();  // catches everything itself
    return Submission(std::move(state));
  }
  e.drain_thread->post([raw] {
    detail::shorten_timer_slack();
    raw->run_drain();
  });
  if (mode == StartMode::worker)
    e.driver_thread->post([raw] {
      detail::shorten_timer_slack();
      raw->run_driver();
    });
  else
    raw->run_driver();  // catches everything itself; saves a thread hand-off
  return Submission(std::move(state));
}

Submission Pipeline::submit() { return start(std::nullopt, StartMode::worker); }
Submission Pipeline::submit(StreamView stream) { return start(stream, StartMode::drive_on_caller); }
RunReport Pipeline::run() { return start(std::nullopt, StartMode::finish_on_caller).wait(); }
RunReport Pipeline::run(StreamView stream) { return start(stream, StartMode::finish_on_caller).wait(); }

// ---------------------------------------------------------------------------
Submission::Submission(std::unique_ptr<State> state) : state_(std::move(state)) {}
Submission::Submission(Submission&&) noexcept = default;

Submission& Submission::operator=(Submission&& other) {
  if (this == &other) return *this;
  Submission earlier(std::move(state_));
  state_ = std::move(other.state_);
  if (earlier.valid()) earlier.wait();  // its failure reaches the caller here
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
  state->await_drained();
  return state->finish();
}

}  // namespace sluice
