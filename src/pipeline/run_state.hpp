#pragma once
// One run of a pipeline (Submission::State). Two threads carry it:
//  - the driver enqueues chunk after chunk: it has the host-pass inputs
//    staged into pinned slots a few chunks ahead, then puts the chunk's H2D,
//    compute and D2H on their streams. The GPU itself holds a chunk's H2D
//    until the D2H of the chunk `depth` earlier has freed its device slot,
//    so the driver runs ahead freely, up to the pinned stage-out slots and
//    event sets;
//  - the drain blocks on each chunk's last event in order, has host-pass
//    outputs staged out of their pinned slots, reports the chunk done, and
//    frees its slots for the driver.
// The host never waits on the device except where a pinned slot must be
// reused, and the caller's thread never spins.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine.hpp"

namespace sluice {

struct Submission::State {
  using Clock = std::chrono::steady_clock;

  State(std::shared_ptr<Pipeline::Engine> engine, ChunkPlan plan, std::optional<StreamView> caller);

  void run_driver() noexcept;
  void run_drain() noexcept;
  // Both on the caller's thread, for run() when nothing passes through the
  // host and nobody waits for chunks one by one: no thread hand-off at all.
  void run_inline() noexcept;
  // Until the drain (or run_inline) is done: blocking, then polling for the very end.
  void await_drained();
  // After both threads are idle: waits for the staging work and the streams,
  // closes sinks, and returns the report or throws the run's failure.
  RunReport finish();

  // What failed, where: composed into the exception finish() throws.
  enum class Failure {
    none,
    callback,   // the compute or chunk-done callable threw: rethrown as it was
    cuda,       // a CUDA call failed: CudaError, with chunk and stage
    io,         // a file source or sink: IoError, with chunk and stage
    component,  // a user's source or sink threw: nested in a runtime_error naming chunk and stage
  };
  void fail(Failure kind, std::size_t chunk, std::string stage, std::exception_ptr error);
  bool has_failed();

  std::shared_ptr<Pipeline::Engine> owner;  // keeps the engine alive while the run is
  Pipeline::Engine& e;
  ChunkPlan plan;
  std::optional<StreamView> caller;
  bool timed = false;         // stage events record time (record or report_bound)
  bool stages_in = false;     // some input passes through the host
  bool stages_out = false;    // some output passes through the host
  Event caller_ready;         // the caller's stream, at submit
  Event origin{Event::Timing::enabled}, finish_event{Event::Timing::enabled};
  Clock::time_point host_origin;
  double host_end_ms = 0;
  std::vector<std::string> notes;
  std::size_t allocated_device = 0, allocated_pinned = 0;
  bool inline_drain = false;
  // Waits for chunks from this one on poll rather than block: the last
  // ~32 MiB of a run, where a blocking wait's ~50 us late wake-up would be
  // added to the run's time instead of hidden behind later chunks.
  std::size_t poll_from = 0;
  std::atomic<bool> drain_finished{false}, driver_finished{false};

  std::mutex mutex;
  std::condition_variable progress;
  std::size_t enqueued = 0;  // chunks whose GPU work is on the streams
  std::size_t drained = 0;   // chunks whose outputs are in host memory (or written by their sinks)
  bool failed = false;
  Failure failure = Failure::none;
  std::size_t failed_chunk = 0;
  std::string failed_stage;
  std::exception_ptr error;

  // Stage-in jobs, [chunk % in_slots][span]; driver thread only.
  std::vector<std::vector<StagingPool::Ticket>> stage_in_jobs;
  std::size_t next_stage_in = 0;  // the first chunk whose stage-in is not submitted yet
  std::size_t h2d_enqueued = 0;   // chunks whose H2D copies are on the stream; driver thread only

  // Host stage intervals come from the steady clock, device ones from events; both from the run's start.
  std::vector<StageInterval> driver_intervals, drain_intervals;
  struct HostSpan {
    std::atomic<std::int64_t> first_ns{INT64_MAX}, last_ns{0};
  };
  std::vector<std::unique_ptr<HostSpan>> stage_in_times;  // [chunk % in_slots], when recording

  double host_ms(Clock::time_point t) const { return std::chrono::duration<double, std::milli>(t - host_origin).count(); }
  std::string chunk_text(std::size_t chunk) const;

 private:
  // Driver steps.
  void enqueue_chunk(std::size_t chunk, const char*& stage);
  void submit_ready_stage_ins(std::size_t chunk);
  void submit_stage_in(std::size_t chunk);
  void wait_stage_in(std::size_t chunk);
  void enqueue_h2d(std::size_t chunk);
  // With nothing to stage in, the H2D copies are enqueued up to depth - 1
  // chunks ahead of the kernels: the first copies then start while the host
  // is still enqueueing the first kernels (a chunk's calls take ~30 us, the
  // ramp's first copy less). Each copy still waits on the GPU for its slot.
  std::size_t last_h2d_with(std::size_t chunk) const;
  void enqueue_h2d_through(std::size_t last);
  void enqueue_compute(std::size_t chunk);
  void enqueue_d2h(std::size_t chunk);
  // Drain steps.
  void wait_chunk_done(std::size_t chunk);
  void mark_drained(std::size_t chunk);
  void record_device_intervals(std::size_t chunk);
  void stage_out(std::size_t chunk);

  // Copies one chunk of a direct (page-locked) span, cut at its extents.
  void copy_direct(const detail::SpanRecord& span, ItemRange range, void* slot, bool to_device, StreamView stream);
};

}  // namespace sluice
