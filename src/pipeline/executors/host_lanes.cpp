// The host executor's lanes: one thread for the H2D "copy engine", one for
// the D2H one and one per compute stream, each running its operations in
// order, as a CUDA stream does; edges are waits on other lanes' marks.
// Every operation is checked against the schedule as it starts
// (host_executor.hpp).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>

#include "engine/jitter.hpp"
#include "engine/lane_thread.hpp"
#include "engine/plan_check.hpp"
#include "executor.hpp"
#include "host_device.hpp"
#include "pipeline/schedule/schedule_plan.hpp"
#include "sluice/pipeline/pipeline.hpp"

namespace sluice::detail {

namespace {

using Clock = std::chrono::steady_clock;

std::string name(OpRef r) { return SchedulePlan::name_of(r); }

class HostLock final : public detail::HostLock {
 public:
  HostLock(std::shared_ptr<HostDevice> device, const void* start) : device_(std::move(device)), start_(start) {}
  ~HostLock() override { device_->unlock(start_); }

 private:
  std::shared_ptr<HostDevice> device_;
  const void* start_;
};

class NoBinding final : public ThreadBinding {};

class HostLanes final : public Executor {
 public:
  HostLanes(std::shared_ptr<HostDevice> device, const PipelineOptions& options)
      : device_(std::move(device)), jitter_(device_->options().jitter_us, device_->options().seed) {
    const std::size_t lanes = 2 + compute_stream_count(options);
    for (std::size_t i = 0; i < lanes; ++i) lanes_.push_back(std::make_unique<engine::LaneThread>());
    device_->lanes_started(lanes);
  }

  ~HostLanes() override {
    const std::size_t lanes = lanes_.size();
    lanes_.clear();  // each lane runs what it was given, then ends
    device_->lanes_stopped(lanes);
  }

  std::string name() const override { return "the host executor"; }
  int device() const override { return -1; }

  std::vector<MemoryExtent> extents(const void* data, std::size_t bytes) const override {
    return device_->extents(data, bytes);
  }
  SlotMemory allocate_device(std::size_t bytes) override { return allocate(bytes, MemoryKind::device); }
  SlotMemory allocate_pinned(std::size_t bytes) override { return allocate(bytes, MemoryKind::pinned); }
  std::size_t free_device_bytes() const override { return device_->free_device_bytes(); }
  std::unique_ptr<detail::HostLock> lock(void* data, std::size_t bytes, bool) override {
    return std::make_unique<HostLock>(device_, device_->lock(data, bytes));
  }

  void prepare(const Schedule& schedule, bool) override {
    plan_.emplace(schedule);
  }
  std::unique_ptr<ThreadBinding> bind_thread() override { return std::make_unique<NoBinding>(); }

  void begin_run(std::optional<StreamView> caller, bool) override {
    if (caller)
      throw std::invalid_argument("the host executor has no CUDA streams: run() or submit() it without a stream");
    std::lock_guard lock(mutex_);
    states_.assign(plan_->groups() * stage_count, State{});
    run_error_ = nullptr;
    broken_ = 0;
    first_broken_.clear();
    finish_ms_ = 0;
    origin_ = Clock::now();
    ++runs_;
  }
  void wait_for_caller_on_host() override {}
  void wait_on_host(StreamView) override {}  // a caller's stream is refused here

  bool keeps(const Op& op, const Edge& edge) const override { return device_->keeps(op, edge); }

  void wait(const Op& op, OpRef on) override {
    enqueue(op, [this, on] {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return settled(state(on)); });
    });
  }
  void wait_for_caller(const Op&) override {}

  void begin(const Op& op) override {
    if (device_->take_fault(op.ref, InjectedFault::Kind::submit))
      throw HostExecutorError("host executor: an injected failure submitting " + detail::name(op.ref));
    enqueue(op, [this, op, key = pause_key(op.ref)] {
      jitter_.pause(key);
      std::lock_guard lock(mutex_);
      start(op);
    });
  }

  void copy(const Op& op, void* to, const void* from, std::size_t bytes) override {
    const bool to_device = op.ref.stage == Stage::h2d;
    if (!device_->within(to_device ? to : from, bytes, true) || !device_->within(to_device ? from : to, bytes, false))
      broke(detail::name(op.ref) + " copies " + std::to_string(bytes) +
            " bytes between memory a copy engine cannot reach (the host side must be page-locked and lie in one "
            "allocation or registration, the device side in one device allocation)");
    enqueue(op, [this, op, to, from, bytes] {
      if (!running(op.ref)) return;
      std::memcpy(to, from, bytes);
    });
  }

  void compute(const Op& op, const Chunk& chunk, const ComputeFn& fn) override {
    if (device_->take_fault(op.ref, InjectedFault::Kind::submit))
      throw HostExecutorError("host executor: an injected failure launching " + detail::name(op.ref));
    auto slots = std::make_shared<std::vector<DeviceSlot>>(chunk.slots.begin(), chunk.slots.end());
    enqueue(op, [this, op, chunk, slots, fn = &fn] {
      if (!running(op.ref)) return;
      Chunk own = chunk;
      own.slots = *slots;
      try {
        (*fn)(own);
      } catch (...) {
        std::lock_guard lock(mutex_);
        fail(op.ref, std::current_exception(), true);
      }
    });
  }

  void end(const Op& op) override {
    enqueue(op, [this, ref = op.ref] {
      {
        std::lock_guard lock(mutex_);
        State& s = state(ref);
        if (s.phase == Phase::started) {
          s.phase = Phase::done;
          s.end_ms = now_ms();
        } else if (!settled(s)) {
          fail(ref, run_error_, run_error_callback_);
        }
      }
      changed_.notify_all();
    });
  }

  void end_run(std::optional<StreamView>) override {
    lanes_[1]->enqueue([this] {
      std::lock_guard lock(mutex_);
      finish_ms_ = now_ms();
    });
  }

  void host_started(const Op& op) override {
    jitter_.pause(pause_key(op.ref));
    if (device_->take_fault(op.ref, InjectedFault::Kind::execution))
      throw HostExecutorError("host executor: an injected failure in " + detail::name(op.ref));
    std::lock_guard lock(mutex_);
    start(op);
  }
  void host_finished(const Op& op) override {
    {
      std::lock_guard lock(mutex_);
      State& s = state(op.ref);
      s.phase = Phase::done;
      s.end_ms = now_ms();
    }
    changed_.notify_all();
  }

  OpStatus status(OpRef op) override {
    std::lock_guard lock(mutex_);
    return status_of(op);
  }
  OpStatus wait_done(OpRef op, Pause) override {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return settled(state(op)); });
    return status_of(op);
  }

  OpTimes times(OpRef op) override {
    std::lock_guard lock(mutex_);
    return {state(op).start_ms, state(op).end_ms};
  }
  double run_ms() override {
    std::lock_guard lock(mutex_);
    return finish_ms_;
  }

  std::exception_ptr synchronize() override {
    // One lane after another: no task enqueues on a lane, and the driver that
    // does has stopped by now, so lanes idle one by one are idle together.
    for (const auto& lane : lanes_) lane->wait_idle();
    std::lock_guard lock(mutex_);
    if (run_error_) return run_error_;
    if (broken_ > 0)
      return std::make_exception_ptr(HostExecutorError("the host executor saw the schedule broken " +
                                                       std::to_string(broken_) + " time(s) in this run; the first: " +
                                                       first_broken_));
    return nullptr;
  }

  std::exception_ptr with_context(std::exception_ptr error, const std::string& where) override {
    try {
      std::rethrow_exception(error);
    } catch (const HostExecutorError& e) {
      return where.empty() ? error : std::make_exception_ptr(HostExecutorError(where + ": " + e.what()));
    } catch (...) {
      return nullptr;
    }
  }

  std::optional<EngineRates> rates(bool, StagingPool&) override { return device_->rates(); }

  std::string cannot_replay() const override { return "the host executor has no CUDA graphs to replay"; }

 private:
  // How far an operation has run, as the engine's checks read it (none: not started).
  using Phase = engine::Progress;
  struct State {
    Phase phase = Phase::none;
    double start_ms = 0, end_ms = 0;
    std::exception_ptr error;
    bool from_callback = false;
    OpRef at;
  };

  SlotMemory allocate(std::size_t bytes, MemoryKind kind) {
    std::byte* data = device_->allocate(bytes, kind);
    return {data, bytes, [device = device_](std::byte* p) { device->free(p); }};
  }

  engine::LaneThread& lane_of(const Op& op) {
    switch (op.ref.stage) {
      case Stage::h2d: return *lanes_[0];
      case Stage::d2h: return *lanes_[1];
      default: return *lanes_[2 + op.stream % (lanes_.size() - 2)];
    }
  }
  void enqueue(const Op& op, std::function<void()> task) { lane_of(op).enqueue(std::move(task)); }

  // An operation's pause differs from run to run of one pipeline.
  std::uint64_t pause_key(OpRef ref) const { return ref.index() ^ (runs_.load() << 40); }

  double now_ms() const { return std::chrono::duration<double, std::milli>(Clock::now() - origin_).count(); }
  State& state(OpRef r) { return states_.at(r.index()); }
  static bool settled(const State& s) { return engine::settled(s.phase); }

  // Whether an operation's work should still run (under no lock).
  bool running(OpRef r) {
    std::lock_guard lock(mutex_);
    return state(r).phase == Phase::started;
  }

  void fail(OpRef at, std::exception_ptr error, bool from_callback) {
    if (!run_error_) {
      run_error_ = error;
      run_error_callback_ = from_callback;
      run_error_at_ = at;
    }
    State& s = state(at);
    s.phase = Phase::failed;
    s.error = run_error_;
    s.from_callback = run_error_callback_;
    s.at = run_error_at_;
    changed_.notify_all();
  }

  OpStatus status_of(OpRef op) {
    const State& s = state(op);
    if (s.phase == Phase::failed) return {true, s.error, s.at, s.from_callback};
    return {s.phase == Phase::done, nullptr, op, false};
  }

  void broke(std::string what) {
    std::lock_guard lock(mutex_);
    if (broken_++ == 0) first_broken_ = what;
    device_->violation(std::move(what));
  }

  // An operation starts (the lock held): once a failure has been seen every
  // later operation fails with it, as after a sticky CUDA error; else it is
  // checked against the whole schedule.
  void start(const Op& op) {
    if (run_error_) {
      fail(op.ref, run_error_, run_error_callback_);
      return;
    }
    if (device_->take_fault(op.ref, InjectedFault::Kind::execution)) {
      fail(op.ref,
           std::make_exception_ptr(HostExecutorError("host executor: an injected failure as " + detail::name(op.ref) +
                                                     " ran")),
           false);
      return;
    }
    check(op);
    State& s = state(op.ref);
    s.phase = Phase::started;
    s.start_ms = now_ms();
  }

  void check(const Op& op) {
    device_->count_checked();
    std::vector<engine::Violation> found;
    engine::check_start(*plan_, plan_->op(SchedulePlan::key(op.ref)),
                        [this](engine::OpKey k) { return state(SchedulePlan::ref(k)).phase; }, found);
    for (const engine::Violation& v : found) {
      std::string what = plan_->describe(v);
      if (broken_++ == 0) first_broken_ = what;
      device_->violation(std::move(what));
    }
  }

  std::shared_ptr<HostDevice> device_;
  std::optional<SchedulePlan> plan_;  // the schedule being run, in the engine's form
  std::mutex mutex_;
  std::condition_variable changed_;
  engine::Jitter jitter_;
  std::atomic<std::uint64_t> runs_{0};  // runs begun, for the pauses; read on the staging threads
  // h2d, d2h, then the compute streams: the destructor ends them before anything they use goes.
  std::vector<std::unique_ptr<engine::LaneThread>> lanes_;
  std::vector<State> states_;  // [operation index] of this run
  std::exception_ptr run_error_;
  bool run_error_callback_ = false;
  OpRef run_error_at_;
  std::size_t broken_ = 0;
  std::string first_broken_;
  Clock::time_point origin_;
  double finish_ms_ = 0;
};

}  // namespace

}  // namespace sluice::detail

namespace sluice {

Pipeline::Pipeline(PipelineOptions options, const HostExecutor& executor)
    : Pipeline(options, [&] {
        if (options.depth == 0) throw std::invalid_argument("pipeline depth must be at least 1");
        compute_stream_count(options);  // refuses more streams than the kernel order allows
        return std::unique_ptr<detail::Executor>(std::make_unique<detail::HostLanes>(executor.device_, options));
      }()) {}

}  // namespace sluice
