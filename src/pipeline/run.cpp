// A run's start: checks, the schedule, slots and sinks made ready; and how a
// failure is recorded (run.hpp says who does what).
#include "run.hpp"

#include <stdexcept>

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
  std::vector<SpanShape> shapes = spans.classify(options.host_memory, exec_, notes_);
  schedule_.emplace(plan_schedule(options, std::move(shapes), spans.item_count(), caller.has_value()));
  const Schedule& s = *schedule_;
  allocated_ = core_.rings().prepare(s, exec_);
  timed_ = options.record || options.report_bound;
  exec_.prepare(s, timed_);
  mode_ = requested;
  if (mode_ == Mode::inline_drain && (s.stages_in() || s.stages_out() || core_.done_fn())) mode_ = Mode::drive_on_caller;

  stage_in_jobs_.assign(s.ring_size(Ring::pinned_in), std::vector<StagingPool::Ticket>(spans.size()));
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
    exec_.begin_run(caller_, options.record);
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

}  // namespace sluice::detail
