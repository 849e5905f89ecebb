#pragma once
// One run of a pipeline over its schedule (Submission::State). Two threads
// carry it:
//  - the driver walks the schedule's device operations in submission order.
//    Before each, it waits on the host only where the host must (a chunk's
//    stage-in done, a pinned slot or event set the drain has not released);
//    the edges between device lanes it hands to the executor, which makes
//    the GPU itself wait. Stage-in operations start as soon as their slot
//    is free, up to the ring's size ahead.
//  - the drain finishes chunks in order: it waits for a chunk's D2H by
//    polling, stages its host-pass outputs out, reports it done, and so
//    releases its pinned stage-out slot and its event set.
// run() with nothing passing through the host and no chunk-done callable
// does both on the caller's thread: the driver finishes a chunk itself when
// it needs that chunk's event set back. Host-only.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/pipeline_core.hpp"
#include "sluice/pipeline/pipeline.hpp"

namespace sluice::detail {

class Run {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Mode {
    threads,          // a driver thread and a drain thread (submit())
    drive_on_caller,  // the caller's thread drives, a thread drains (submit(stream))
    inline_drain,     // the caller's thread does both (run() with no host pass)
    replay,           // the caller's thread launches the captured run, capturing it first if need be
  };

  // Checks, classifies the spans and plans the schedule; throws before any
  // work for a bad configuration. `called` is when run() or submit() was
  // called. inline_drain is taken only where nothing passes through the host
  // and no chunk-done callable waits: else the caller drives, a thread drains.
  Run(std::shared_ptr<PipelineCore> core, std::optional<StreamView> caller, Mode requested, Clock::time_point called);
  Mode mode() const { return mode_; }

  void drive() noexcept;
  void drain() noexcept;
  void drive_and_drain() noexcept;
  void replay() noexcept;
  // Until the drain (or drive_and_drain) is done: blocking, then polling for the very end.
  void await_drained();
  // After both threads are done: waits for the staging work and the device,
  // commits or abandons the sinks, and returns the report or throws the
  // run's failure, said in full.
  RunReport finish();

 private:
  // What failed, where: composed into the exception finish() throws.
  enum class Failure {
    none,
    // A callable threw: the compute callable (stage compute) or the
    // chunk-done one (stage done_stage), nested in a runtime_error naming the
    // callable, the chunk and the stage, where std::rethrow_if_nested finds
    // it. Thrown anywhere else (the drain's own std::bad_alloc): rethrown as it was.
    callback,
    device,     // the executor failed (a CUDA call): its error, with chunk and stage
    io,         // a file source or sink: IoError, with chunk and stage
    component,  // a user's source or sink threw: nested in a runtime_error naming chunk and stage
  };
  static constexpr const char* done_stage = "chunk done";
  // Thrown once a failure is recorded, to unwind the thread that saw it.
  struct Stopped {};
  void fail(Failure kind, std::size_t chunk, std::string stage, std::exception_ptr error);
  bool has_failed();
  void fail_from(const OpStatus& status);
  std::string chunk_text(std::size_t chunk) const;
  double host_ms(Clock::time_point t) const { return std::chrono::duration<double, std::milli>(t - host_origin_).count(); }

  // Driver.
  // Chunk `chunk`'s GPU operations, after the H2D copies the schedule puts
  // before its compute (last_h2d_with); `next_h2d` is the first not yet submitted.
  void submit_chunk(std::size_t chunk, std::size_t& next_h2d);
  void submit(const Op& op);
  // Replayed runs: why this run cannot be replayed (empty: it can), and what
  // its capture depends on (a new key means capturing again).
  std::string cannot_replay() const;
  std::vector<std::uintptr_t> capture_key() const;
  void wait_on_host(const Edge& edge);
  void start_ready_stage_ins();
  void start_stage_in(std::size_t chunk);
  void finish_stage_in(std::size_t chunk);
  void copy_direct(const Op& op, const SpanRecord& span, void* device, bool to_device);
  // The sub-page ends of spans whose page-locking is sluice's own travel
  // through that lock's pinned buffer: filled from the inputs before the
  // run's first copy in, emptied into the outputs for `items` once their
  // copy out has landed.
  void edges_in();
  void edges_out(ItemRange items);
  bool has_input_edges() const;
  void run_compute(const Op& op);
  // Drain: a chunk's finish begins once its D2H is done (its stage-out
  // started) and ends once its outputs are in host memory.
  struct Draining {
    Op op;  // the chunk's stage-out
    Clock::time_point begin;
    std::vector<std::pair<std::size_t, StagingPool::Ticket>> jobs;  // [span, job]
    bool staged_out() const;
    void settle() noexcept;  // waits for the jobs, whatever they throw
  };
  void wait_until_drained(std::size_t chunk);  // the driver's side
  Draining begin_chunk(std::size_t chunk);
  void end_chunk(Draining& d);
  std::vector<std::pair<std::size_t, StagingPool::Ticket>> start_stage_out(const Op& op);
  void finish_stage_out(Draining& d);
  void record_device_intervals(std::size_t chunk);
  // A learning run's lesson, from its stage intervals: kept in the pipeline; returns the note that says it.
  std::string learn_from_intervals();
  void commit_sinks(std::size_t items_done);

  std::shared_ptr<PipelineCore> owner_;  // keeps the pipeline's state alive while the run is
  PipelineCore& core_;
  Executor& exec_;
  std::optional<StreamView> caller_;
  Mode mode_ = Mode::threads;
  bool timed_ = false;  // stage marks record time (record, report_bound, or a run that learns)
  // This run times its stages to learn whether the kernels dominate
  // (PipelineOptions::adapt_chunks); learnt_plan_ says what later runs cut if they do.
  bool learning_ = false;
  std::string learnt_plan_;
  std::vector<double> compute_enqueue_ms_;  // [chunk] the host's time in the compute callable, when learning
  std::vector<std::string> notes_;
  std::optional<Schedule> schedule_;
  SlotRings::Allocated allocated_;
  Clock::time_point called_, host_origin_;
  double host_end_ms_ = 0;
  double driver_busy_ms_ = 0;  // host time the driver spent submitting
  double first_copy_ms_ = 0, last_copy_ms_ = 0;  // device times from the origin, for RunReport::overhead
  // Waits for chunks from this one on poll rather than sleep: the last
  // ~32 MiB of a run, where a late wake-up would add to the run's time
  // instead of hiding behind later chunks.
  std::size_t poll_from_ = 0;
  std::atomic<bool> drain_finished_{false}, driver_finished_{false};

  std::mutex mutex_;
  std::condition_variable progress_;
  std::size_t enqueued_ = 0;  // chunks whose D2H is submitted
  // Chunks finished: outputs in host memory (or written by their sinks),
  // and reported to the chunk-done callable, even where it then threw.
  std::size_t drained_ = 0;
  std::size_t edges_out_to_ = 0;  // chunks whose sub-page ends are copied out (the drain's thread; read at finish)
  bool failed_ = false;
  Failure failure_ = Failure::none;
  std::size_t failed_chunk_ = 0;
  std::string failed_stage_;
  std::exception_ptr error_;

  // Stage-in jobs by pinned-in slot, [slot][span]; driver thread only.
  std::vector<std::vector<StagingPool::Ticket>> stage_in_jobs_;
  std::size_t next_stage_in_ = 0;  // the first chunk whose stage-in has not started
  std::size_t submitted_h2d_ = 0;  // chunks whose H2D is submitted
  std::vector<DeviceSlot> chunk_slots_;  // the compute callable's view of the device slots

  // Host stage intervals come from the steady clock, device ones from the executor; both from the run's origin.
  std::vector<StageInterval> driver_intervals_, drain_intervals_;
  struct HostSpan {
    std::atomic<std::int64_t> first_ns{INT64_MAX}, last_ns{0};
  };
  std::vector<std::unique_ptr<HostSpan>> stage_in_times_;  // [pinned-in slot], when recording
};

}  // namespace sluice::detail
