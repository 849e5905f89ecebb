#include "ring/host_ring_state.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>

#include "engine/jitter.hpp"

namespace sluice::ring {

void HostRingExecutor::State::jitter(std::uint64_t key) const {
  engine::Jitter(options.jitter_us, options.seed).pause(key);
}

void HostRingExecutor::State::wait_edges(const RingOp& op, std::unique_lock<std::mutex>& lock) {
  for (const RingEdge& e : op) {
    if (e.why == Why::ahead || !kept(op, e)) continue;
    changed.wait(lock, [&] { return finished(e.on) || (finishing && run(e.on) == Run::none); });
  }
}

void HostRingExecutor::State::check(const RingOp& op) {
  ++checked;
  std::vector<engine::Violation> found;
  engine::check_start(*engine_plan, engine_plan->op(RingEnginePlan::key(op.ref)),
                      [this](engine::OpKey k) { return progress(RingEnginePlan::ref(k)); }, found);
  for (const engine::Violation& v : found) violation(engine_plan->describe(v));
}

void HostRingExecutor::State::timed_take(std::chrono::steady_clock::time_point from) {
  const auto now = std::chrono::steady_clock::now();
  const double waited = std::chrono::duration<double, std::milli>(now - from).count();
  if (timed_takes == 0) idle.fill_ms = waited;
  else idle.waited_ms += waited;
  // The loop runs from where the lane reached the second take to where it reached the last.
  if (timed_takes == 1) loop_start = from;
  if (timed_takes >= 1) idle.loop_ms = std::chrono::duration<double, std::milli>(from - loop_start).count();
  ++timed_takes;
}

std::optional<std::string> HostRingExecutor::State::perform(const RingOp& op, bool* lane_failed, const std::function<void()>& work) {
  std::optional<std::string> failed;
  {
    const auto from = std::chrono::steady_clock::now();
    std::unique_lock lock(mutex);
    wait_edges(op, lock);
    if (op.ref.step == Step::take && plan->timed()) timed_take(from);
  }
  jitter(op.ref.index());
  {
    std::lock_guard lock(mutex);
    check(op);
    if (lane_failed && *lane_failed) failed = "an earlier operation on its lane failed";
    for (const RingEdge& e : op)
      if (!failed && e.why != Why::ahead && run(e.on) == Run::failed)
        failed = fmt::format("the {} of position {} it waits on failed", to_string(e.on.step), e.on.position);
    const auto fault = std::find_if(faults.begin(), faults.end(), [&](const RingFault& f) { return f.at == op.ref; });
    if (!failed && fault != faults.end()) {
      faults.erase(fault);
      failed = fmt::format("an injected failure of its {}", to_string(op.ref.step));
    }
  }
  if (!failed && work) {
    try {
      work();
    } catch (const std::exception& e) {
      failed = e.what();
    }
  }
  {
    std::lock_guard lock(mutex);
    run(op.ref) = failed ? Run::failed : Run::done;
    if (failed && lane_failed) {
      *lane_failed = true;
      if (!first_failure) first_failure = LaneFailure{op.ref, *failed};
    }
  }
  changed.notify_all();
  return failed;
}

}  // namespace sluice::ring
