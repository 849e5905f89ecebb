#include "pipeline_core.hpp"

#include <cstdio>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

namespace sluice::detail {

void shorten_timer_slack() {
#if defined(__linux__)
  (void)prctl(PR_SET_TIMERSLACK, 1000UL);  // nanoseconds; a failure leaves the default, which is only slower
#endif
}

std::uint64_t new_span_generation() {
  static std::atomic<std::uint64_t> counter{0};
  return ++counter;
}

PipelineCore::PipelineCore(PipelineOptions options, std::unique_ptr<Executor> executor)
    : options_(options), executor_(std::move(executor)), generation_(new_span_generation()) {}

PipelineCore::~PipelineCore() {
  // The threads first: nothing may run while what it uses is freed.
  driver_thread_.reset();
  drain_thread_.reset();
  try {
    const auto binding = executor_->bind_thread();
    spans_.clear();  // waits for background page-locking, then undoes it
    registrar_.reset();
    pool_.reset();
    rings_.clear();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: releasing a pipeline: %s\n", e.what());
  }
}

std::size_t PipelineCore::add(SpanRecord span) {
  const std::size_t index = spans_.add(std::move(span));
  gates_.push_back(std::make_unique<ChunkGate>());
  return index;
}

void PipelineCore::clear_spans() {
  spans_.clear();  // joins background page-locking and undoes it
  gates_.clear();
  compute_fn_ = nullptr;
  kernel_bound_.reset();
  ++capture_version_;
  generation_ = new_span_generation();
  ran_ = false;
}

StagingPool& PipelineCore::staging_pool() {
  if (!pool_)
    pool_ = std::make_unique<StagingPool>(options_.staging_threads > 0 ? options_.staging_threads
                                                                       : StagingPool::default_thread_count());
  return *pool_;
}

StagingPool& PipelineCore::registrar() {
  if (!registrar_) registrar_ = std::make_unique<StagingPool>(1);
  return *registrar_;
}

WorkerThread& PipelineCore::driver_thread() {
  if (!driver_thread_) driver_thread_ = std::make_unique<WorkerThread>(shorten_timer_slack);
  return *driver_thread_;
}

WorkerThread& PipelineCore::drain_thread() {
  if (!drain_thread_) drain_thread_ = std::make_unique<WorkerThread>(shorten_timer_slack);
  return *drain_thread_;
}

// ---------------------------------------------------------------------------
void ChunkGate::reset(std::size_t first) {
  std::lock_guard lock(mutex_);
  next_ = first;
  closed_ = false;
}

void ChunkGate::enter(std::size_t chunk) {
  std::unique_lock lock(mutex_);
  turn_.wait(lock, [&] { return closed_ || next_ == chunk; });
  if (closed_) throw std::runtime_error("stopped: an earlier chunk failed");
}

void ChunkGate::leave() {
  {
    std::lock_guard lock(mutex_);
    ++next_;
  }
  turn_.notify_all();
}

void ChunkGate::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  turn_.notify_all();
}

}  // namespace sluice::detail
