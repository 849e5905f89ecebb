// The public Pipeline and Submission: checks, ownership, and starting runs.
#include "sluice/pipeline/pipeline.hpp"

#include <cstdio>
#include <stdexcept>

#include "pipeline/run/run.hpp"

namespace sluice {

using detail::PipelineCore;
using detail::Run;

struct Submission::State {
  std::unique_ptr<Run> run;
};

namespace {

PipelineCore& usable(const std::shared_ptr<PipelineCore>& core, const char* what) {
  if (!core) throw std::logic_error("use of a moved-from Pipeline");
  if (core->busy()) throw std::logic_error(std::string("cannot ") + what + " while a run is in flight");
  return *core;
}

void refuse_after_run(const PipelineCore& core) {
  if (core.ran())
    throw std::logic_error(
        "spans are added before the first run: rebind() a span to other memory, or clear_spans() and add them anew "
        "(with a new compute callable)");
}

}  // namespace

Pipeline::Pipeline(PipelineOptions options, std::unique_ptr<detail::Executor> executor) {
  if (options.depth == 0) throw std::invalid_argument("pipeline depth must be at least 1");
  compute_stream_count(options);  // refuses more streams than the kernel order allows
  core_ = std::make_shared<PipelineCore>(options, std::move(executor));
}

Pipeline::~Pipeline() = default;
Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;

const PipelineOptions& Pipeline::options() const {
  if (!core_) throw std::logic_error("use of a moved-from Pipeline");
  return core_->options();
}

int Pipeline::device() const {
  if (!core_) throw std::logic_error("use of a moved-from Pipeline");
  return core_->executor().device();
}

std::uint64_t Pipeline::generation() const { return core_->generation(); }

std::size_t Pipeline::add_host(const void* data, std::size_t items, std::size_t item_bytes, SpanRole role,
                               std::shared_ptr<const void> owner) {
  PipelineCore& core = usable(core_, "add spans");
  refuse_after_run(core);
  detail::SpanRecord span;
  span.role = role;
  span.item_bytes = item_bytes;
  span.items = items;
  span.host = static_cast<std::byte*>(const_cast<void*>(data));
  span.owner = std::move(owner);
  return core.add(std::move(span));
}

std::size_t Pipeline::add_source(std::shared_ptr<Source> source, std::size_t item_bytes) {
  PipelineCore& core = usable(core_, "add spans");
  refuse_after_run(core);
  if (!source) throw std::invalid_argument("input(): the source is null");
  if (source->item_bytes() != item_bytes)
    throw std::invalid_argument("input(): " + source->name() + " has items of " + std::to_string(source->item_bytes()) +
                                " bytes, but the handle's type has " + std::to_string(item_bytes));
  detail::SpanRecord span;
  span.role = SpanRole::input;
  span.item_bytes = item_bytes;
  span.items = source->item_count();
  span.source = std::move(source);
  return core.add(std::move(span));
}

std::size_t Pipeline::add_sink(std::shared_ptr<Sink> sink, std::size_t item_bytes) {
  PipelineCore& core = usable(core_, "add spans");
  refuse_after_run(core);
  if (!sink) throw std::invalid_argument("output(): the sink is null");
  if (sink->item_bytes() != item_bytes)
    throw std::invalid_argument("output(): " + sink->name() + " takes items of " + std::to_string(sink->item_bytes()) +
                                " bytes, but the handle's type has " + std::to_string(item_bytes));
  detail::SpanRecord span;
  span.role = SpanRole::output;
  span.item_bytes = item_bytes;
  span.items = sink->item_count();
  span.sink = std::move(sink);
  return core.add(std::move(span));
}

void Pipeline::rebind_host(std::size_t index, std::uint64_t generation, const void* data, std::size_t items,
                           bool writable, std::shared_ptr<const void> owner) {
  PipelineCore& core = usable(core_, "rebind a span");
  if (generation != core.generation() || index >= core.spans().size())
    throw std::logic_error("rebind(): the handle belongs to another pipeline, or to spans cleared since it was made");
  core.spans().rebind(index, data, items, writable);
  core.spans()[index].owner = std::move(owner);
  core.spans_changed();  // a captured run copies to and from the old memory
}

Pipeline& Pipeline::compute(ComputeFn fn, Replay replay) {
  usable(core_, "replace the compute callable").set_compute(std::move(fn), replay);
  return *this;
}

Pipeline& Pipeline::on_chunk_done(ChunkDoneFn fn) {
  usable(core_, "replace the chunk-done callable").set_done(std::move(fn));
  return *this;
}

Pipeline& Pipeline::clear_spans() {
  usable(core_, "clear spans").clear_spans();
  return *this;
}

Submission Pipeline::start(std::optional<StreamView> caller, StartMode mode) {
  const auto called = Run::Clock::now();
  if (!core_) throw std::logic_error("use of a moved-from Pipeline");
  PipelineCore& core = *core_;
  if (!core.claim()) throw std::logic_error("this pipeline is already running; wait for it or use a second pipeline");
  std::unique_ptr<Run> run;
  try {
    const Run::Mode requested = mode == StartMode::worker             ? Run::Mode::threads
                                : mode == StartMode::drive_on_caller ? Run::Mode::drive_on_caller
                                                                      : Run::Mode::inline_drain;
    run = std::make_unique<Run>(core_, caller, requested, called);
    // The last run's tasks may still be returning.
    if (run->mode() != Run::Mode::inline_drain && run->mode() != Run::Mode::replay) core.drain_thread().wait_idle();
    if (run->mode() == Run::Mode::threads) core.driver_thread().wait_idle();
    core.mark_ran();
  } catch (...) {
    run.reset();
    core.spans().after_run(false, core.executor(), core.registrar());
    core.release();
    throw;
  }
  Run* raw = run.get();
  switch (raw->mode()) {
    case Run::Mode::inline_drain: raw->drive_and_drain(); break;  // catches everything itself
    case Run::Mode::replay: raw->replay(); break;                  // likewise; wait() waits for it
    case Run::Mode::drive_on_caller:
      core.drain_thread().post([raw] { raw->drain(); });
      raw->drive();  // saves a thread hand-off
      break;
    case Run::Mode::threads:
      core.drain_thread().post([raw] { raw->drain(); });
      core.driver_thread().post([raw] { raw->drive(); });
      break;
  }
  return Submission(std::make_unique<Submission::State>(Submission::State{std::move(run)}));
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
  state->run->await_drained();
  return state->run->finish();
}

}  // namespace sluice
