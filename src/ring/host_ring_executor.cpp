#include "ring/host_ring_executor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "ring/lane_thread.hpp"

namespace sluice::ring {

namespace {

// Slots start as this byte, so that a slot read before its copy shows.
constexpr std::byte poison{0xEE};

std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

enum class Run : std::uint8_t { none, submitted, done, failed };

}  // namespace

struct HostRingExecutor::State {
  HostRingOptions options;
  mutable std::mutex mutex;
  std::condition_variable changed;
  std::optional<RingPlan> plan;
  std::vector<std::vector<std::byte>> device, staging;
  std::vector<Run> runs;  // by OpRef::index()
  std::vector<std::optional<std::size_t>> device_holder;   // the position a device slot holds until released
  std::vector<std::optional<std::size_t>> staging_holder;  // the position a staging slot holds until copied
  std::vector<RingFault> faults;
  EdgeFilter keep;
  std::vector<std::string> violations;
  std::size_t checked = 0;
  std::optional<LaneFailure> first_failure;
  bool copy_failed = false, consumer_failed = false;
  bool finishing = false;
  std::uint64_t consumer_work = 0;
  std::unique_ptr<LaneThread> staging_lane, copy_lane, consumer_lane;

  Run& run(OpRef ref) { return runs.at(ref.index()); }
  bool finished(OpRef ref) {
    const Run r = run(ref);
    return r == Run::done || r == Run::failed;
  }
  bool kept(const RingOp& op, const RingEdge& e) const { return !keep || keep(op, e); }

  void submitted(OpRef ref) {
    std::lock_guard lock(mutex);
    run(ref) = Run::submitted;
  }

  void jitter(std::uint64_t key) const {
    if (options.jitter_us == 0) return;
    const auto us = mix64(options.seed * 0x100000001b3ull ^ key) % (options.jitter_us + 1);
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }

  // The lane waits for the edges it keeps. The `ahead` edge is the
  // producer's host wait, in the engine. Once finishing, an operation never
  // submitted will not come: the wait gives up (the checks still see it).
  void wait_edges(const RingOp& op, std::unique_lock<std::mutex>& lock) {
    for (const RingEdge& e : op) {
      if (e.why == Why::ahead || !kept(op, e)) continue;
      changed.wait(lock, [&] { return finished(e.on) || (finishing && run(e.on) == Run::none); });
    }
  }

  void violation(std::string what) { violations.push_back(std::move(what)); }

  // The plan's edges and the slots' holders, as the operation starts.
  void check(const RingOp& op) {
    ++checked;
    const std::size_t p = op.ref.position;
    for (const RingEdge& e : op) {
      if (e.why == Why::ahead ? run(e.on) == Run::none : !finished(e.on))
        violation(fmt::format("position {} {}: starts before the {} of position {} ({})", p, to_string(op.ref.step),
                              to_string(e.on.step), e.on.position, to_string(e.why)));
    }
    if (op.ref.step == Step::stage) {
      auto& holder = staging_holder.at(op.staging_slot);
      if (holder && *holder != p)
        violation(fmt::format("position {} stage: staging slot {} overwritten while its copy of position {} is pending",
                              p, op.staging_slot, *holder));
      holder = p;
    } else if (op.ref.step == Step::copy) {
      auto& holder = device_holder.at(op.device_slot);
      if (holder && *holder != p)
        violation(fmt::format("position {} copy: device slot {} overwritten while position {} is not released", p,
                              op.device_slot, *holder));
      holder = p;
    } else if (op.ref.step == Step::take) {
      const auto& holder = device_holder.at(op.device_slot);
      if (holder != p)
        violation(fmt::format("position {} take: device slot {} holds {}", p, op.device_slot,
                              holder ? fmt::format("position {}", *holder) : std::string("nothing")));
    }
  }

  void finished_with_slots(const RingOp& op) {
    const std::size_t p = op.ref.position;
    if (op.ref.step == Step::copy && plan->staged() && staging_holder.at(op.staging_slot) == p)
      staging_holder.at(op.staging_slot).reset();
    if (op.ref.step == Step::release && device_holder.at(op.device_slot) == p) device_holder.at(op.device_slot).reset();
  }

  // Runs one operation of the plan on the calling lane: its waits, its
  // checks, its work. `lane_failed`: the lane's sticky failure (none for a
  // stage, whose failure goes to the producer that called it).
  // Returns the failure, empty when it ran.
  std::optional<std::string> perform(const RingOp& op, bool* lane_failed, const std::function<void()>& work) {
    std::optional<std::string> failed;
    {
      std::unique_lock lock(mutex);
      wait_edges(op, lock);
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
      finished_with_slots(op);
      run(op.ref) = failed ? Run::failed : Run::done;
      if (failed && lane_failed) {
        *lane_failed = true;
        if (!first_failure) first_failure = LaneFailure{op.ref, *failed};
      }
    }
    changed.notify_all();
    return failed;
  }
};

HostRingExecutor::HostRingExecutor(HostRingOptions options) : s_(std::make_unique<State>()) { s_->options = options; }

HostRingExecutor::~HostRingExecutor() { finish(); }

void HostRingExecutor::inject(RingFault fault) {
  std::lock_guard lock(s_->mutex);
  s_->faults.push_back(fault);
}

void HostRingExecutor::ignore_edges(EdgeFilter keep) {
  std::lock_guard lock(s_->mutex);
  s_->keep = std::move(keep);
}

bool HostRingExecutor::keeps(const RingOp& op, const RingEdge& edge) const {
  std::lock_guard lock(s_->mutex);
  return s_->kept(op, edge);
}

void HostRingExecutor::make_slots(const RingPlan& plan) {
  std::lock_guard lock(s_->mutex);
  if (s_->plan) throw std::logic_error("host ring executor: runs one ring at a time");
  s_->plan.emplace(plan);
  s_->device.assign(plan.slots(), std::vector<std::byte>(plan.slot_bytes(), poison));
  s_->staging.assign(plan.staging_slots(), std::vector<std::byte>(plan.slot_bytes(), poison));
  s_->runs.assign(plan.positions() * step_count, Run::none);
  s_->device_holder.assign(plan.slots(), std::nullopt);
  s_->staging_holder.assign(plan.staging_slots(), std::nullopt);
  s_->first_failure.reset();
  s_->copy_failed = s_->consumer_failed = s_->finishing = false;
  s_->staging_lane = std::make_unique<LaneThread>();
  s_->copy_lane = std::make_unique<LaneThread>();
  s_->consumer_lane = std::make_unique<LaneThread>();
}

std::byte* HostRingExecutor::staging_slot(std::size_t slot) { return s_->staging.at(slot).data(); }
std::byte* HostRingExecutor::device_slot(std::size_t slot) { return s_->device.at(slot).data(); }

void HostRingExecutor::stage(const RingOp& op, const Fill& fill) {
  if (!op.active) return;
  s_->submitted(op.ref);
  std::byte* slot = staging_slot(op.staging_slot);
  const std::size_t bytes = s_->plan->slot_bytes();
  // The fill's own exception reaches the producer as it was thrown.
  std::exception_ptr thrown;
  auto done = std::make_shared<std::promise<std::optional<std::string>>>();
  auto result = done->get_future();
  s_->staging_lane->enqueue([&, done] {
    done->set_value(s_->perform(op, nullptr, [&] {
      try {
        fill({slot, bytes});
      } catch (...) {
        thrown = std::current_exception();
        throw;
      }
    }));
  });
  // The host waits: the copy reads the staging slot once the producer enqueues it.
  if (const auto failed = result.get()) {
    if (thrown) std::rethrow_exception(thrown);
    throw std::runtime_error("host ring executor: " + *failed);
  }
}

void HostRingExecutor::copy(const RingOp& op, const std::byte* from) {
  s_->submitted(op.ref);
  std::byte* to = device_slot(op.device_slot);
  const std::size_t bytes = s_->plan->slot_bytes();
  State* s = s_.get();
  s_->copy_lane->enqueue([s, op, to, from, bytes] { s->perform(op, &s->copy_failed, [&] { std::memcpy(to, from, bytes); }); });
}

void HostRingExecutor::ready(const RingOp& op) {
  s_->submitted(op.ref);
  State* s = s_.get();
  s_->copy_lane->enqueue([s, op] { s->perform(op, &s->copy_failed, {}); });
}

void HostRingExecutor::take(const RingOp& op, ConsumerLane) {
  s_->submitted(op.ref);
  State* s = s_.get();
  s_->consumer_lane->enqueue([s, op] { s->perform(op, &s->consumer_failed, {}); });
}

void HostRingExecutor::release(const RingOp& op, ConsumerLane) {
  s_->submitted(op.ref);
  State* s = s_.get();
  s_->consumer_lane->enqueue([s, op] { s->perform(op, &s->consumer_failed, {}); });
}

void HostRingExecutor::on_consumer(std::function<void()> work) {
  State* s = s_.get();
  if (!s->consumer_lane) throw std::logic_error("host ring executor: no ring is running");
  std::uint64_t key = 0;
  {
    std::lock_guard lock(s->mutex);
    key = ~s->consumer_work++;
  }
  s->consumer_lane->enqueue([s, key, work = std::move(work)] {
    {
      std::lock_guard lock(s->mutex);
      if (s->consumer_failed) return;
    }
    s->jitter(key);
    try {
      work();
    } catch (const std::exception& e) {
      std::lock_guard lock(s->mutex);
      s->violation(std::string("the consumer's work threw: ") + e.what());
    }
  });
}

std::optional<LaneFailure> HostRingExecutor::failure() const {
  std::lock_guard lock(s_->mutex);
  return s_->first_failure;
}

void HostRingExecutor::host_wait(OpRef op) {
  std::unique_lock lock(s_->mutex);
  s_->changed.wait(lock, [&] { return s_->finished(op) || (s_->finishing && s_->run(op) == Run::none); });
}

void HostRingExecutor::finish() noexcept {
  {
    std::lock_guard lock(s_->mutex);
    if (!s_->plan) return;
    s_->finishing = true;
  }
  s_->changed.notify_all();
  // Each lane runs what it was given to the end: waits on operations that
  // never came give up, so none waits forever.
  std::unique_ptr<LaneThread> lanes[3];
  {
    std::lock_guard lock(s_->mutex);
    lanes[0] = std::move(s_->staging_lane);
    lanes[1] = std::move(s_->copy_lane);
    lanes[2] = std::move(s_->consumer_lane);
  }
  for (auto& lane : lanes) lane.reset();
  std::lock_guard lock(s_->mutex);
  s_->device.clear();
  s_->staging.clear();
  s_->plan.reset();
}

HostRingExecutor::Holdings HostRingExecutor::holdings() const {
  Holdings h;
  std::lock_guard lock(s_->mutex);
  for (const auto& slot : s_->device) h.device_bytes += slot.size();
  for (const auto& slot : s_->staging) h.staging_bytes += slot.size();
  for (const auto* lane : {&s_->staging_lane, &s_->copy_lane, &s_->consumer_lane})
    if (*lane) {
      ++h.lane_threads;
      h.pending += (*lane)->pending();
    }
  return h;
}

std::vector<std::string> HostRingExecutor::violations() const {
  std::lock_guard lock(s_->mutex);
  return s_->violations;
}

std::size_t HostRingExecutor::operations_checked() const {
  std::lock_guard lock(s_->mutex);
  return s_->checked;
}

}  // namespace sluice::ring
