// The CUDA executor: a schedule's device operations on CUDA streams, its
// edges as events the streams wait on, and the GPU's memory for the rings.
// It enqueues what the driver hands it and nothing else (executor.hpp).
#include <nvtx3/nvToolsExt.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <mutex>
#include <stdexcept>

#include "bound/host_rates.hpp"
#include "bound/link_rates.hpp"
#include "bound/staging_rates.hpp"
#include "capture_marks.hpp"
#include "core/event_poll.hpp"
#include "core/made_on.hpp"
#include "executor.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/event.hpp"
#include "sluice/core/host_registration.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/pipeline/pipeline.hpp"

namespace sluice::detail {

namespace {

int resolve_device(const PipelineOptions& o) {
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

// Page-locking runs one at a time in the process: a range's edge pages are
// checked for a neighbour's lock first, which only holds if no neighbour is
// locking at the same moment. On 4 KiB pages, registering with more threads
// was no faster (measured: 25 GB/s with 1, 27 with 4).
std::mutex& registration_mutex() {
  static std::mutex m;
  return m;
}

// Read-only mappings (an mmap'd input file) register only as read-only; any
// other memory is registered writable, since a page at an input's edge may
// hold an output's first bytes too, which a D2H copy must be able to write.
bool read_only_supported(int device) {
  int supported = 0;
  const bool known = cudaDeviceGetAttribute(&supported, cudaDevAttrHostRegisterReadOnlySupported, device) == cudaSuccess;
  (void)cudaGetLastError();
  return known && supported != 0;
}

class CudaLock final : public HostLock {
 public:
  explicit CudaLock(HostRegistration r) : registration_(std::move(r)) {}

 private:
  HostRegistration registration_;
};

class Binding final : public ThreadBinding {
 public:
  explicit Binding(int device) : scope_(device) {}

 private:
  DeviceScope scope_;
};

// The events that carry one chunk from stage to stage, on the device's three lanes.
struct EventSet {
  explicit EventSet(Event::Timing timing)
      : start{Event(timing), Event(timing), Event(timing)}, done{Event(timing), Event(timing), Event(timing)} {}
  std::array<Event, 3> start, done;  // h2d, compute, d2h
};

std::size_t lane_index(Stage stage) {
  switch (stage) {
    case Stage::h2d: return 0;
    case Stage::compute: return 1;
    case Stage::d2h: return 2;
    default: throw std::logic_error("the CUDA executor runs no host stage");
  }
}

class CudaExecutor final : public Executor, public Replayer {
 public:
  explicit CudaExecutor(const PipelineOptions& o)
      : device_(resolve_device(o)),
        h2d_(made_on<Stream>(device_, o.priority)),
        d2h_(made_on<Stream>(device_, o.priority)),
        caller_ready_(made_on<Event>(device_, Event::Timing::disabled)),
        origin_(made_on<Event>(device_, Event::Timing::enabled)),
        finish_(made_on<Event>(device_, Event::Timing::enabled)),
        graph_done_(made_on<Event>(device_, Event::Timing::disabled)) {
    for (unsigned i = 0; i < compute_stream_count(o); ++i) compute_.push_back(made_on<Stream>(device_, o.priority));
  }

  ~CudaExecutor() override {
    abort_capture();
    const DeviceScope scope(device_);
    if (exec_) SLUICE_CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(exec_));
    if (graph_) SLUICE_CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph_));
  }

  std::string name() const override { return "GPU " + std::to_string(device_); }
  int device() const override { return device_; }

  // Called from a thread bound to the device (bind_thread).
  std::vector<MemoryExtent> extents(const void* data, std::size_t bytes) const override {
    return memory_extents(data, bytes);
  }

  SlotMemory allocate_device(std::size_t bytes) override {
    const DeviceScope scope(device_);
    auto buffer = std::make_shared<DeviceBuffer<std::byte>>(bytes, h2d_.view());
    h2d_.synchronize();  // the new slot exists before any stream uses it
    std::byte* data = buffer->data();
    return {data, bytes, [buffer](std::byte*) mutable { buffer.reset(); }};
  }

  SlotMemory allocate_pinned(std::size_t bytes) override {
    const DeviceScope scope(device_);
    auto buffer = std::make_shared<PinnedBuffer<std::byte>>(bytes);
    std::byte* data = buffer->data();
    return {data, bytes, [buffer](std::byte*) mutable { buffer.reset(); }};
  }

  std::size_t free_device_bytes() const override {
    const DeviceScope scope(device_);
    std::size_t free_bytes = 0, total_bytes = 0;
    SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return free_bytes;
  }

  std::unique_ptr<HostLock> lock(void* data, std::size_t bytes, bool read_only) override {
    const std::lock_guard serial(registration_mutex());
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    auto begin = reinterpret_cast<std::uintptr_t>(data) / page * page;
    auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes + page - 1) / page * page;
    // A first or last page shared with memory that is page-locked already (a
    // neighbouring span's lock, small arrays side by side on the heap) stays
    // as it is: locking it again would fail, and its bytes can be copied
    // directly already.
    const DeviceScope scope(device_);
    auto locked = [](std::uintptr_t at) { return is_page_locked_host(memory_kind(reinterpret_cast<const void*>(at))); };
    while (begin < end && locked(begin)) begin += page;
    while (end > begin && locked(end - page)) end -= page;
    if (begin == end) return std::make_unique<CudaLock>(HostRegistration{});
    // One registration for the whole range: another library that sees the
    // memory as page-locked (PyTorch's pin_memory() does) may copy any part
    // of it in one transfer, and a transfer may not cross two registrations.
    void* at = reinterpret_cast<void*>(begin);
    try {
      return std::make_unique<CudaLock>(HostRegistration(at, end - begin, cudaHostRegisterPortable));
    } catch (const CudaError&) {
      if (!read_only || !read_only_supported(device_)) throw;
      return std::make_unique<CudaLock>(
          HostRegistration(at, end - begin, cudaHostRegisterPortable | cudaHostRegisterReadOnly));
    }
  }

  void prepare(const Schedule& schedule, bool timed) override {
    const std::size_t sets = schedule.ring_size(Ring::event_set);
    if (events_.size() != sets || timed_ != timed) {
      const DeviceScope scope(device_);
      events_.clear();
      const auto timing = timed ? Event::Timing::enabled : Event::Timing::disabled;
      for (std::size_t i = 0; i < sets; ++i) events_.emplace_back(timing);
      timed_ = timed;
    }
    prepared_chunks_ = schedule.chunk_count();
  }

  std::unique_ptr<ThreadBinding> bind_thread() override { return std::make_unique<Binding>(device_); }

  void begin_run(std::optional<StreamView> caller, bool align_clocks) override {
    finish_recorded_ = false;
    graph_done_recorded_ = false;
    marked_ = false;
    if (caller) caller_ready_.record(*caller);
    // The origin is a timing event, and recording one costs the host a few
    // microseconds before the first copy (2.6 us on the H200, where an event
    // without timing takes 0.2): only a run that times its stages marks it.
    origin_marked_ = timed_ || align_clocks;
    if (origin_marked_) origin_.record(h2d_);
    if (align_clocks) origin_.synchronize();
  }
  void wait_for_caller_on_host() override { caller_ready_.synchronize(); }
  void wait_on_host(StreamView stream) override { stream.synchronize(); }

  void wait(const Op& op, OpRef on) override { lane(op).wait(done(on)); }
  void wait_for_caller(const Op& op) override { lane(op).wait(caller_ready_); }

  void begin(const Op& op) override {
    // Nsight Systems shows the stage by name and the chunk as the payload:
    // no string is formatted per operation.
    static constexpr const char* names[] = {"sluice stage-in", "sluice h2d", "sluice compute", "sluice d2h",
                                            "sluice stage-out"};
    nvtxEventAttributes_t range{};
    range.version = NVTX_VERSION;
    range.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    range.messageType = NVTX_MESSAGE_TYPE_ASCII;
    range.message.ascii = names[static_cast<std::size_t>(op.ref.stage)];
    range.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    range.payload.ullValue = op.ref.chunk;
    nvtxRangePushEx(&range);
    if (!timed_) return;
    if (capturing_)
      marks_.record(op.ref.chunk, lane_index(op.ref.stage), MarkEnd::start, lane(op).get());
    else
      start(op.ref).record(lane(op));
  }

  void copy(const Op& op, void* to, const void* from, std::size_t bytes) override {
    const auto kind = op.ref.stage == Stage::h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, kind, lane(op).get()));
  }

  void compute(const Op& op, const Chunk& chunk, const ComputeFn& fn) override {
    Chunk on_stream = chunk;
    on_stream.stream = lane(op);
    fn(on_stream);
    // A bad launch configuration shows here.
    if (const cudaError_t launch = cudaGetLastError(); launch != cudaSuccess)
      throw CudaError(launch, "a kernel launch by the compute callable", __FILE__, __LINE__);
  }

  void end(const Op& op) override {
    done(op.ref).record(lane(op));
    if (timed_ && capturing_) marks_.record(op.ref.chunk, lane_index(op.ref.stage), MarkEnd::end, lane(op).get());
    nvtxRangePop();
  }

  void end_run(std::optional<StreamView> caller) override {
    // The D2H stream's last copy waits for the last kernel, which waits for the last H2D.
    finish_.record(d2h_);
    finish_recorded_ = true;
    if (caller) caller->wait(finish_);
  }

  void host_started(const Op&) override {}
  void host_finished(const Op&) override {}

  OpStatus status(OpRef op) override { return status_of(op, cudaEventQuery(done(op).get())); }
  OpStatus wait_done(OpRef op, Pause pause) override {
    return status_of(op, poll_event(done(op).get(), pause == Pause::sleep ? PollPause::sleep : PollPause::yield));
  }

  OpTimes times(OpRef op) override {
    if (marked_)
      return {static_cast<double>(elapsed_ms(origin_, marks_.at(op.chunk, lane_index(op.stage), MarkEnd::start))),
              static_cast<double>(elapsed_ms(origin_, marks_.at(op.chunk, lane_index(op.stage), MarkEnd::end)))};
    return {static_cast<double>(elapsed_ms(origin_, start(op))), static_cast<double>(elapsed_ms(origin_, done(op)))};
  }
  double run_ms() override { return origin_marked_ ? elapsed_ms(origin_, finish_) : 0.0; }

  std::exception_ptr synchronize() override {
    // A run that reached its finish mark has nothing left on any stream: the
    // mark follows the last D2H, which follows every kernel and H2D.
    if (finish_recorded_ && cudaEventQuery(finish_.get()) == cudaSuccess) return nullptr;
    if (graph_done_recorded_ && cudaEventQuery(graph_done_.get()) == cudaSuccess) return nullptr;  // the whole graph
    (void)cudaGetLastError();
    // After a sticky error these fail again; the failure is already known.
    cudaError_t error = cudaStreamSynchronize(h2d_.get());
    for (auto& s : compute_)
      if (const cudaError_t c = cudaStreamSynchronize(s.get()); error == cudaSuccess) error = c;
    if (const cudaError_t c = cudaStreamSynchronize(d2h_.get()); error == cudaSuccess) error = c;
    if (error == cudaSuccess) return nullptr;
    (void)cudaGetLastError();
    return std::make_exception_ptr(CudaError(error, "cudaStreamSynchronize at the end of the run", __FILE__, __LINE__));
  }

  std::exception_ptr with_context(std::exception_ptr error, const std::string& where) override {
    try {
      std::rethrow_exception(error);
    } catch (const CudaError& e) {
      return where.empty() ? error : std::make_exception_ptr(CudaError(e, where));
    } catch (...) {
      return nullptr;
    }
  }

  // ---- Replayed runs: stream capture into a CUDA graph, launched as one.
  Replayer* replayer() override { return this; }
  std::string cannot_replay() const override { return {}; }

  void begin_capture() override {
    // A timed capture is a replayed run that learns its chunks (capture_marks.hpp).
    marked_ = timed_;
    if (marked_) {
      const DeviceScope scope(device_);
      marks_.reserve(prepared_chunks_);
    }
    // Thread-local: only the driver's own calls are held to what a capture
    // allows; other threads of the process carry on as they are.
    SLUICE_CUDA_CHECK(cudaStreamBeginCapture(h2d_.get(), cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
  }

  void end_capture() override {
    // Every stream the capture forked into joins the H2D stream, where it
    // began. Only those: a compute stream no chunk used (more streams than
    // chunks) is not part of the capture, and waiting on it would break it.
    const DeviceScope scope(device_);  // the join events belong to the pipeline's device
    joins_.resize(compute_.size() + 1);
    auto join = [&](Stream& stream, Event& mark) {
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      SLUICE_CUDA_CHECK(cudaStreamIsCapturing(stream.get(), &status));
      if (status != cudaStreamCaptureStatusActive) return;
      mark.record(stream);
      h2d_.wait(mark);
    };
    for (std::size_t i = 0; i < compute_.size(); ++i) join(compute_[i], joins_[i]);
    join(d2h_, joins_.back());
    cudaGraph_t graph = nullptr;
    capturing_ = false;
    SLUICE_CUDA_CHECK(cudaStreamEndCapture(h2d_.get(), &graph));
    // An updated launchable graph keeps its place on the GPU; a new one is
    // instantiated only where the update is refused (the shape changed).
    if (exec_) {
      cudaGraphExecUpdateResultInfo info{};
      if (cudaGraphExecUpdate(exec_, graph, &info) != cudaSuccess) {
        (void)cudaGetLastError();
        (void)cudaGraphExecDestroy(exec_);
        exec_ = nullptr;
      }
    }
    if (!exec_) {
      const cudaError_t made = cudaGraphInstantiate(&exec_, graph, 0);
      if (made != cudaSuccess) {
        (void)cudaGraphDestroy(graph);
        exec_ = nullptr;
        SLUICE_CUDA_CHECK(made);
      }
    }
    if (graph_) (void)cudaGraphDestroy(graph_);
    graph_ = graph;
  }

  void abort_capture() noexcept override {
    if (!capturing_) return;
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(h2d_.get(), &graph) == cudaSuccess && graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
  }

  void replay(std::optional<StreamView> caller) override {
    const StreamView stream = caller ? *caller : h2d_.view();
    finish_recorded_ = false;
    // Only a replay that reads its timing marks (a run that learns) marks
    // its origin and finish with timing events: recording one costs the
    // host microseconds before the launch (more after a large run), and an
    // untimed replay is timed by the host, as an untimed run() is.
    origin_marked_ = marked_;
    if (origin_marked_) origin_.record(stream);
    graph_done_recorded_ = false;
    SLUICE_CUDA_CHECK(cudaGraphLaunch(exec_, stream.get()));
    graph_done_.record(stream);
    graph_done_recorded_ = true;
    if (origin_marked_) {
      finish_.record(stream);
      finish_recorded_ = true;
    }
  }

  std::exception_ptr wait_replayed(Pause pause) override {
    const cudaError_t code = poll_event(graph_done_.get(), pause == Pause::sleep ? PollPause::sleep : PollPause::yield);
    if (code == cudaSuccess) return nullptr;
    (void)cudaGetLastError();
    return std::make_exception_ptr(CudaError(code, "a replayed run (cudaGraphLaunch)", __FILE__, __LINE__));
  }

  std::optional<EngineRates> rates(bool staged, StagingPool& pool) override {
    EngineRates rates = with_link({}, link_rates(device_));
    if (!staged) return rates;
    // The faster of link idle and link streaming for staging alone: a bound
    // no run can beat; and the two sharing host memory.
    const HostCopyRates beside_link = staging_rates(device_, pool);
    return with_staging_beside_link(with_host(rates, fastest_of(beside_link, host_copy_rates(pool))), beside_link);
  }

 private:
  StreamView lane(const Op& op) const {
    switch (op.ref.stage) {
      case Stage::h2d: return h2d_.view();
      case Stage::d2h: return d2h_.view();
      default: return compute_[op.stream % compute_.size()].view();
    }
  }
  Event& done(OpRef op) { return events_[op.chunk % events_.size()].done[lane_index(op.stage)]; }
  Event& start(OpRef op) { return events_[op.chunk % events_.size()].start[lane_index(op.stage)]; }

  static OpStatus status_of(OpRef op, cudaError_t code) {
    if (code == cudaSuccess) return {true, nullptr, op, false};
    if (code == cudaErrorNotReady) return {false, nullptr, op, false};
    (void)cudaGetLastError();
    if (is_sticky_error(code))
      // Every earlier chunk was seen complete, so the fault is in this
      // chunk's work or a later one's already running; the kernels are the likely cause.
      return {true,
              std::make_exception_ptr(CudaError(CudaError(code, "a kernel launched by the compute callable", __FILE__, __LINE__),
                                                "at or after this chunk; every chunk before it had completed")),
              OpRef{op.chunk, Stage::compute}, false};
    return {true, std::make_exception_ptr(CudaError(code, "cudaEventQuery (operation done)", __FILE__, __LINE__)), op, false};
  }

  int device_;
  Stream h2d_, d2h_;
  std::vector<Stream> compute_;
  std::vector<EventSet> events_;  // [chunk % event sets]
  bool timed_ = false;
  Event caller_ready_, origin_, finish_;
  Event graph_done_;                  // after a replayed run's graph
  bool graph_done_recorded_ = false;  // this run recorded it
  bool finish_recorded_ = false;  // this run recorded its finish mark
  bool origin_marked_ = false;    // this run recorded its origin: run_ms() is the device's
  std::vector<Event> joins_;  // where a capture's streams join back
  bool capturing_ = false;
  std::size_t prepared_chunks_ = 0;  // the chunks of the schedule last prepared: the marks a capture needs
  CaptureMarks marks_;
  bool marked_ = false;  // the captured run carries its marks: times() reads them
  cudaGraph_t graph_ = nullptr;         // the last capture
  cudaGraphExec_t exec_ = nullptr;      // what replay() launches
};

}  // namespace

}  // namespace sluice::detail

namespace sluice {

Pipeline::Pipeline(PipelineOptions options)
    : Pipeline(options, [&] {
        if (options.depth == 0) throw std::invalid_argument("pipeline depth must be at least 1");
        compute_stream_count(options);  // refuses more streams than the kernel order allows
        return std::unique_ptr<detail::Executor>(std::make_unique<detail::CudaExecutor>(options));
      }()) {}

}  // namespace sluice
