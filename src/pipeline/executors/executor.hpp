#pragma once
// Where a schedule's device operations run: the CUDA executor enqueues them
// on streams and events; the host executor runs them on host threads over
// host memory and checks every edge. The pipeline's own logic (the driver
// that walks the schedule, the drain that finishes chunks, staging, sources
// and sinks, failures) is the same over either. Host-only: no CUDA header.
//
// The driver calls, for each device operation in the schedule's submission
// order: wait() for each edge on another device lane, begin(), the
// operation's copies or compute, end(). Host operations (stage-in, stage-out)
// run on the staging threads; the executor is told when they start and end.
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sluice/bound/bound.hpp"
#include "sluice/core/pointer_query.hpp"
#include "sluice/core/stream_view.hpp"
#include "sluice/pipeline/chunk.hpp"
#include "sluice/pipeline/pipeline.hpp"
#include "sluice/pipeline/schedule.hpp"

namespace sluice {
class StagingPool;
}  // namespace sluice

namespace sluice::detail {

// Memory an executor hands out for a ring slot. Owning, move-only.
class SlotMemory {
 public:
  SlotMemory() = default;
  SlotMemory(std::byte* data, std::size_t bytes, std::function<void(std::byte*)> release)
      : data_(data), bytes_(bytes), release_(std::move(release)) {}
  SlotMemory(SlotMemory&& other) noexcept { *this = std::move(other); }
  SlotMemory& operator=(SlotMemory&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      release_ = std::move(other.release_);
    }
    return *this;
  }
  ~SlotMemory() { reset(); }
  std::byte* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void reset() {
    if (data_ && release_) release_(data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::function<void(std::byte*)> release_;
};

// Page-locking of caller memory; undone when destroyed (after nothing uses it).
class HostLock {
 public:
  virtual ~HostLock() = default;
};

// The calling thread may use the executor while this lives (the CUDA
// executor makes its device current, and puts the previous one back).
class ThreadBinding {
 public:
  virtual ~ThreadBinding() = default;
};

enum class Pause {
  sleep,  // ~20 us between queries: costs almost no CPU, wakes a little late
  yield,  // only yields the core: wakes within microseconds, for the end of a run
};

// What the host sees of a device operation.
struct OpStatus {
  bool done = false;
  std::exception_ptr error;  // the operation, or one it depended on, failed
  // Where the failure is put: a faulting kernel is only seen on the GPU
  // when a later copy's event reports it.
  OpRef at;
  bool from_callback = false;  // the error is what the compute callable threw
};

struct OpTimes {
  double start_ms = 0, end_ms = 0;  // from the run's origin
};

class Replayer;

class Executor {
 public:
  virtual ~Executor() = default;
  // For messages: "GPU 0 (NVIDIA H200)", "the host executor".
  virtual std::string name() const = 0;
  // The CUDA device, or -1.
  virtual int device() const = 0;

  // ---- Memory
  // Where the bytes of [data, data + bytes) live (pointer_query.hpp).
  virtual std::vector<MemoryExtent> extents(const void* data, std::size_t bytes) const = 0;
  virtual SlotMemory allocate_device(std::size_t bytes) = 0;
  virtual SlotMemory allocate_pinned(std::size_t bytes) = 0;
  virtual std::size_t free_device_bytes() const = 0;
  // Page-locks [data, data + bytes) in place. Throws when it cannot.
  virtual std::unique_ptr<HostLock> lock(void* data, std::size_t bytes, bool read_only) = 0;

  // ---- One run
  // Makes the lanes and event sets the schedule needs (kept across runs).
  virtual void prepare(const Schedule& schedule, bool timed) = 0;
  virtual std::unique_ptr<ThreadBinding> bind_thread() = 0;
  // Marks the run's origin, and what is on the caller's stream by now;
  // `align_clocks`: waits until the origin has passed, so host and device
  // times line up. The host executor refuses a caller's stream
  // (std::invalid_argument): it has none.
  virtual void begin_run(std::optional<StreamView> caller, bool align_clocks) = 0;
  // Blocks the host until the caller's earlier work is done (staging reads caller memory).
  virtual void wait_for_caller_on_host() = 0;
  // The same for a replayed run, which marks nothing at begin_run: until `stream`'s work so far is done.
  virtual void wait_on_host(StreamView stream) = 0;

  // Whether the driver keeps to this edge of the schedule: always, except on
  // a host executor told to leave edges out (HostExecutor::ignore_edges), to
  // show what each one guards.
  virtual bool keeps(const Op& /*op*/, const Edge& /*edge*/) const { return true; }

  // The driver, per device operation.
  virtual void wait(const Op& op, OpRef on) = 0;  // `on` is a device operation on another lane
  virtual void wait_for_caller(const Op& op) = 0;
  virtual void begin(const Op& op) = 0;
  virtual void copy(const Op& op, void* to, const void* from, std::size_t bytes) = 0;
  // Runs or enqueues the compute of one chunk. A failure at submission
  // throws: the callable's own exception as it was, or the executor's.
  virtual void compute(const Op& op, const Chunk& chunk, const ComputeFn& fn) = 0;
  virtual void end(const Op& op) = 0;
  // After the last operation: the finish mark, which the caller's stream waits for.
  virtual void end_run(std::optional<StreamView> caller) = 0;

  // Host operations, as the staging threads start and finish them.
  virtual void host_started(const Op& op) = 0;
  virtual void host_finished(const Op& op) = 0;

  // ---- The host's view
  virtual OpStatus status(OpRef op) = 0;
  virtual OpStatus wait_done(OpRef op, Pause pause) = 0;
  // Start and end of a device operation of a timed run, from the origin.
  virtual OpTimes times(OpRef op) = 0;
  // From the origin to the finish mark; 0 where the run marked no origin
  // (an untimed run: its wall time is the host's, from the run's start).
  virtual double run_ms() = 0;
  // Waits for every lane to be idle; the first failure seen, or null.
  virtual std::exception_ptr synchronize() = 0;
  // `error` with the place of the failure put in front, where the executor's
  // own error types take one (a CudaError); null where it does not.
  virtual std::exception_ptr with_context(std::exception_ptr error, const std::string& where) = 0;

  // The engines' rates at their best, for RunReport::bound (nullopt: not known here).
  virtual std::optional<EngineRates> rates(bool staged, StagingPool& pool) = 0;

  // ---- Replayed runs (Replay::graph): a capability, not every executor's
  // The executor's replayer; null where runs cannot be captured and replayed here.
  virtual Replayer* replayer() { return nullptr; }
  // Why runs cannot be replayed here; empty where they can.
  virtual std::string cannot_replay() const = 0;
};

// Runs captured once and replayed, where the executor can (a CUDA graph).
class Replayer {
 public:
  virtual ~Replayer() = default;
  // From begin_capture() to end_capture(), the driver's device operations
  // are captured, not run; end_capture() makes them the run that replay()
  // launches, in place of any captured before. abort_capture() ends a
  // capture that failed and keeps nothing of it.
  virtual void begin_capture() = 0;
  virtual void end_capture() = 0;
  virtual void abort_capture() noexcept = 0;
  // Launches the captured run after the caller's earlier work (and the
  // caller's later work after it), with the origin and finish marks around it.
  virtual void replay(std::optional<StreamView> caller) = 0;
  // Until the replayed run is done; its failure, or null.
  virtual std::exception_ptr wait_replayed(Pause pause) = 0;
};

}  // namespace sluice::detail
