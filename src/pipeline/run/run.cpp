// A run's start: checks, the schedule, slots and sinks made ready; and how a
// failure is recorded (run.hpp says who does what).
#include "run.hpp"

#include <algorithm>
#include <stdexcept>

#include "pipeline/schedule/chunking.hpp"
#include "sluice/core/byte_size.hpp"

namespace sluice::detail {

Run::Run(std::shared_ptr<PipelineCore> core, std::optional<StreamView> caller, Mode requested,
         Clock::time_point called)
    : owner_(std::move(core)), core_(*owner_), exec_(core_.executor()), caller_(caller), called_(called) {
  const auto binding = exec_.bind_thread();
  const PipelineOptions& options = core_.options();
  SpanSet& spans = core_.spans();
  spans.validate();
  if (!core_.compute_fn())
    throw std::invalid_argument("pipeline has no compute callable (clear_spans() forgets it with the spans)");
  const bool replayed = core_.replay() == Replay::graph;
  std::vector<SpanShape> shapes = spans.classify(options.host_memory, exec_, notes_, replayed);
  // Refused as soon as each span's path is known: before slots are allocated.
  if (replayed) {
    if (const std::string why = cannot_replay(); !why.empty())
      throw std::invalid_argument("this run cannot be replayed (Replay::graph): " + why);
    for (std::size_t k = 0; k < spans.size(); ++k)
      if (spans[k].run_lock)
        notes_.push_back(spans[k].describe(k) +
                         " is page-locked for this run alone (HostMemoryPolicy::register_memory), so a replayed run is "
                         "captured again each time: keep it page-locked between runs to replay one capture");
  }
  // A replayed pipeline learns from its first run too: that run is captured
  // with a timing mark around every stage.
  const bool adapts = may_adapt_chunks(options);
  const bool unlearnt = adapts && !core_.kernel_bound().has_value();
  schedule_.emplace(plan_schedule(options, unlearnt ? shapes : std::move(shapes), spans.item_count(),
                                  caller.has_value(), adapts && core_.kernel_bound().value_or(false), replayed));
  const Schedule& s = *schedule_;
  if (unlearnt) {
    // Learnt only where the answer changes the chunks: not where the host
    // copies both ways (a staged run), nor for data too small to ramp.
    std::size_t widest = 1;
    for (const SpanShape& shape : shapes) widest = std::max(widest, shape.item_bytes);
    const Schedule kernel_bound =
        plan_schedule(options, std::move(shapes), spans.item_count(), caller.has_value(), true, replayed);
    learning_ = kernel_bound.chunk_count() != s.chunk_count() ||
                (kernel_bound.chunk_count() > 0 && kernel_bound.plan().chunk(0) != s.plan().chunk(0));
    if (learning_)
      learnt_plan_ = std::to_string(kernel_bound.chunk_count()) +
                     (kernel_bound.plan().is_ramped() ? " chunks, the first and last of " : " chunks of ") +
                     format_bytes(kernel_bound.plan().chunk(0).size() * widest);
  }
  allocated_ = core_.rings().prepare(s, exec_);
  // A replayed run is timed as a whole, not stage by stage, unless it learns.
  timed_ = learning_ || ((options.record || options.report_bound) && !replayed);
  exec_.prepare(s, timed_);
  mode_ = requested;
  if (mode_ == Mode::inline_drain && (s.stages_in() || s.stages_out() || core_.done_fn())) mode_ = Mode::drive_on_caller;
  if (replayed) {
    mode_ = Mode::replay;
    if (options.record || options.report_bound)
      notes_.push_back(learning_ ? "a replayed run that learns its chunks times its stages, but draws no timeline"
                                 : "a replayed run is timed as a whole: no timeline, and the bound leaves the kernel out");
  }

  stage_in_jobs_.assign(s.ring_size(Ring::pinned_in), std::vector<StagingPool::Ticket>(spans.size()));
  // Left 0 for a replayed run: its callable ran at capture, not beside its kernels.
  if (learning_) compute_enqueue_ms_.assign(s.chunk_count(), 0.0);
  chunk_slots_.resize(spans.size());
  if (options.record)
    for (std::size_t i = 0; i < s.ring_size(Ring::pinned_in); ++i) stage_in_times_.push_back(std::make_unique<HostSpan>());
  constexpr std::size_t poll_bytes = std::size_t{32} << 20;
  const std::size_t item_bytes = s.in_item_bytes() + s.out_item_bytes();
  poll_from_ = s.chunk_count();
  for (std::size_t tail = 0; poll_from_ > 0;) {
    tail += s.plan().chunk(poll_from_ - 1).size() * item_bytes;
    if (tail > poll_bytes && poll_from_ < s.chunk_count()) break;
    --poll_from_;
  }

  // Sources and sinks get ready all or none: a sink that begins changes
  // nothing a reader sees, and is abandoned if a later span refuses.
  std::vector<Sink*> begun;
  try {
    for (auto& span : spans)
      if (span.source) span.source->begin_run();
    for (auto& span : spans)
      if (span.sink) {
        span.sink->begin_run();
        begun.push_back(span.sink.get());
      }
    for (std::size_t k = 0; k < spans.size(); ++k) core_.gate(k).reset(0);
    // Host intervals are drawn beside device ones only when recording: only
    // then is it worth aligning the two clocks by waiting for the origin.
    // A replayed run marks its own origin as it is launched.
    if (mode_ != Mode::replay) exec_.begin_run(caller_, options.record);
  } catch (...) {
    for (Sink* sink : begun) sink->abandon(0);
    throw;
  }
  host_origin_ = Clock::now();
}

std::string Run::chunk_text(std::size_t chunk) const {
  const ItemRange r = schedule_->plan().chunk(chunk);
  return "chunk " + std::to_string(chunk) + " of " + std::to_string(schedule_->chunk_count()) + " (items " +
         std::to_string(r.begin) + ".." + std::to_string(r.end) + ")";
}

void Run::fail(Failure kind, std::size_t chunk, std::string stage, std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    if (!failed_) {
      failure_ = kind;
      failed_chunk_ = chunk;
      failed_stage_ = std::move(stage);
      error_ = error;
    }
    failed_ = true;
  }
  for (std::size_t k = 0; k < core_.spans().size(); ++k) core_.gate(k).close();  // a source or sink waiting its turn gives up
  progress_.notify_all();
}

bool Run::has_failed() {
  std::lock_guard lock(mutex_);
  return failed_;
}

void Run::fail_from(const OpStatus& status) {
  fail(status.from_callback ? Failure::callback : Failure::device, status.at.chunk, std::string(to_string(status.at.stage)),
       status.error);
}

// ---------------------------------------------------------------------------
// Replayed runs

std::string Run::cannot_replay() const {
  if (std::string why = exec_.cannot_replay(); !why.empty()) return why;
  if (core_.done_fn()) return "a chunk-done callable runs on the host for every chunk";
  const SpanSet& spans = core_.spans();
  for (std::size_t k = 0; k < spans.size(); ++k) {
    const SpanRecord& s = spans[k];
    switch (s.path) {
      case HostPath::direct: break;
      case HostPath::staged:
        return s.describe(k) +
               " is pageable memory the host stages: page-lock it (a sluice::HostRegistration the caller holds) or "
               "pass pinned memory";
      case HostPath::source: return s.describe(k) + " is a source: the host fills its slots on every run";
      case HostPath::sink: return s.describe(k) + " is a sink: the host empties its slots on every run";
    }
  }
  return {};
}

// A captured run copies from and to these addresses, into these slots, in
// this schedule: when any of it changes, the run is captured again.
std::vector<std::uintptr_t> Run::capture_key() const {
  const Schedule& s = *schedule_;
  // A run that learns is captured with its timing marks, and the next run again without them.
  std::vector<std::uintptr_t> key{core_.capture_version(), static_cast<std::uintptr_t>(core_.rings().version()),
                                  s.chunk_count(), s.plan().chunk_items(), s.plan().chunk(0).size(), s.depth(),
                                  s.compute_streams(), s.caller_stream(), timed_};
  for (const SpanRecord& span : core_.spans()) {
    key.push_back(reinterpret_cast<std::uintptr_t>(span.host));
    key.push_back(span.bytes());
    // Where copies are cut, and which page-locking each piece was captured
    // over: the copy nodes keep the locking they saw, so memory unlocked and
    // locked again (a HostRegistration ended and taken anew, or
    // register_memory's lock of each run) must be captured again, never
    // replayed over.
    // The buffer its sub-page ends go through (head and tail follow from the address and size).
    const SpanLock* own = span.own_lock();
    key.push_back(reinterpret_cast<std::uintptr_t>(own ? own->edge_buffer() : nullptr));
    for (const MemoryExtent& e : span.extents) {
      key.push_back(e.offset);
      key.push_back(static_cast<std::uintptr_t>(e.allocation_id));
      key.push_back(static_cast<std::uintptr_t>(e.registration));
    }
  }
  return key;
}

void Run::replay() noexcept {
  const Schedule& s = *schedule_;
  if (s.chunk_count() == 0) {  // no items: nothing to capture or launch
    driver_finished_.store(true, std::memory_order_release);
    return;
  }
  try {
    const auto binding = exec_.bind_thread();
    Replayer& replayer = *exec_.replayer();  // a run that cannot be replayed here was refused as it was made
    if (std::vector<std::uintptr_t> key = capture_key(); key != core_.captured()) {
      core_.set_captured({});  // nothing valid is captured until this capture succeeds
      replayer.begin_capture();
      try {
        // Chunk by chunk, each H2D just before its kernel: the graph's edges
        // are the schedule's either way, but the order nodes are captured
        // in is the order a launch hands them to the copy engines.
        for (std::size_t chunk = 0; chunk < s.chunk_count(); ++chunk)
          for (const Stage stage : {Stage::h2d, Stage::compute, Stage::d2h}) submit(s.op(chunk, stage));
        replayer.end_capture();
      } catch (...) {
        replayer.abort_capture();
        throw;
      }
      core_.set_captured(std::move(key));
    }
    if (has_input_edges()) {  // the ends of the inputs, read once the caller's earlier work has written them
      if (caller_) exec_.wait_on_host(*caller_);
      edges_in();
    }
    host_origin_ = Clock::now();
    replayer.replay(caller_);
    enqueued_ = s.chunk_count();
  } catch (const Stopped&) {
  } catch (...) {
    if (!has_failed())
      fail(exec_.with_context(std::current_exception(), "") ? Failure::device : Failure::callback,
           s.chunk_count() > 0 ? s.chunk_count() - 1 : 0, "replay", std::current_exception());
  }
  driver_finished_.store(true, std::memory_order_release);
}

}  // namespace sluice::detail
