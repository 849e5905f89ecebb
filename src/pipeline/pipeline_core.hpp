#pragma once
// What a Pipeline owns between runs: its options, the executor its device
// work runs on, its spans, the rings of slots, the callables, and the
// threads that carry a run. A run (run.hpp) holds it alive while it goes, so
// a Pipeline may be destroyed or moved with a submission in flight.
// Host-only.
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "core/staging_pool.hpp"
#include "pipeline/executors/executor.hpp"
#include "pipeline/run/chunk_gate.hpp"
#include "pipeline/run/worker_thread.hpp"
#include "pipeline/spans/slot_rings.hpp"
#include "pipeline/spans/span_set.hpp"
#include "sluice/pipeline/pipeline.hpp"

namespace sluice::detail {

// Lets this thread's short sleeps end when asked (Linux timer slack 1 us
// instead of 50 us), so the drain's polling wakes near its 20 us. For the
// threads a pipeline owns, once as each starts.
void shorten_timer_slack();

class PipelineCore {
 public:
  PipelineCore(PipelineOptions options, std::unique_ptr<Executor> executor);
  ~PipelineCore();
  PipelineCore(const PipelineCore&) = delete;
  PipelineCore& operator=(const PipelineCore&) = delete;

  const PipelineOptions& options() const { return options_; }
  Executor& executor() { return *executor_; }
  SpanSet& spans() { return spans_; }
  const SpanSet& spans() const { return spans_; }
  SlotRings& rings() { return rings_; }
  ChunkGate& gate(std::size_t span) { return *gates_[span]; }

  // Spans, callables, generations: the Pipeline's own calls (pipeline.cpp).
  std::size_t add(SpanRecord span);
  void clear_spans();
  std::uint64_t generation() const { return generation_; }
  const ComputeFn& compute_fn() const { return compute_fn_; }
  const ChunkDoneFn& done_fn() const { return done_fn_; }
  void set_compute(ComputeFn fn, Replay replay) {
    compute_fn_ = std::move(fn);
    replay_ = replay;
    ++capture_version_;
    kernel_bound_.reset();
  }
  Replay replay() const { return replay_; }
  // Changes whenever what a captured run copies or launches may have: a new
  // callable, a span rebound, the spans cleared.
  std::uint64_t capture_version() const { return capture_version_; }
  void spans_changed() { ++capture_version_; }
  // What the executor's captured run was captured from (Run::capture_key), empty when none.
  const std::vector<std::uintptr_t>& captured() const { return captured_; }
  void set_captured(std::vector<std::uintptr_t> key) { captured_ = std::move(key); }
  void set_done(ChunkDoneFn fn) { done_fn_ = std::move(fn); }
  // What a timed run learnt of the compute callable (PipelineOptions::adapt_chunks):
  // whether its kernels take longer than the copies. Unset until then; a new callable forgets it.
  const std::optional<bool>& kernel_bound() const { return kernel_bound_; }
  void set_kernel_bound(bool bound) { kernel_bound_ = bound; }
  bool ran() const { return ran_; }
  void mark_ran() { ran_ = true; }

  // One run at a time: claim() fails while one is in flight.
  bool claim() {
    bool idle = false;
    return busy_.compare_exchange_strong(idle, true);
  }
  void release() { busy_.store(false); }
  bool busy() const { return busy_.load(); }

  StagingPool& staging_pool();
  // One thread: page-locking of owned spans between runs, one at a time.
  StagingPool& registrar();
  WorkerThread& driver_thread();
  WorkerThread& drain_thread();

 private:
  PipelineOptions options_;
  std::unique_ptr<Executor> executor_;
  SpanSet spans_;
  std::vector<std::unique_ptr<ChunkGate>> gates_;  // one per span: sources and sinks that are not splittable
  SlotRings rings_;
  ComputeFn compute_fn_;
  ChunkDoneFn done_fn_;
  Replay replay_ = Replay::none;
  std::optional<bool> kernel_bound_;
  std::uint64_t capture_version_ = 0;
  std::vector<std::uintptr_t> captured_;
  std::uint64_t generation_ = 0;
  bool ran_ = false;  // spans were run since they were added: adding more is refused
  std::atomic<bool> busy_{false};
  std::unique_ptr<StagingPool> pool_, registrar_;
  // Threads last: they are joined first, before what they use is freed.
  std::unique_ptr<WorkerThread> driver_thread_, drain_thread_;
};

}  // namespace sluice::detail
