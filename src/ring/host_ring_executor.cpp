#include "ring/host_ring_executor.hpp"

#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "ring/host_ring_state.hpp"

namespace sluice::ring {

namespace {

// Slots start as this byte, so that a slot read before its copy shows.
constexpr std::byte poison{0xEE};

}  // namespace


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
  s_->engine_plan.emplace(*s_->plan);
  s_->device.clear();
  for (std::size_t d = 0; d < plan.slots(); ++d)
    s_->device.push_back(std::make_shared<std::vector<std::byte>>(plan.device_slot_bytes(), poison));
  s_->staging.assign(plan.staging_slots(), std::vector<std::byte>(plan.slot_bytes(), poison));
  s_->runs.clear();
  s_->first_failure.reset();
  s_->copy_failed = s_->consumer_failed = s_->finishing = false;
  s_->staging_lane = std::make_unique<engine::LaneThread>();
  s_->copy_lane = std::make_unique<engine::LaneThread>();
  s_->consumer_lane = std::make_unique<engine::LaneThread>();
  if (plan.transformed()) s_->side_lane = std::make_unique<engine::LaneThread>();
  s_->idle = {};
  s_->timed_takes = 0;
}

std::byte* HostRingExecutor::staging_slot(std::size_t slot) {
  std::lock_guard lock(s_->mutex);
  return s_->staging.at(slot).data();
}

std::byte* HostRingExecutor::device_slot(std::size_t slot) {
  std::lock_guard lock(s_->mutex);
  return s_->device.at(slot)->data();
}

std::shared_ptr<void> HostRingExecutor::slot_memory(std::size_t slot) {
  std::lock_guard lock(s_->mutex);
  return s_->device.at(slot);
}

void HostRingExecutor::stage(const RingOp& op, std::size_t bytes, const Fill& fill) {
  if (!op.active) return;
  s_->submitted(op.ref);
  // The fill's own exception reaches the producer as it was thrown.
  std::exception_ptr thrown;
  auto done = std::make_shared<std::promise<std::optional<std::string>>>();
  auto result = done->get_future();
  s_->staging_lane->enqueue([&, done] {
    done->set_value(s_->perform(op, nullptr, [&] {
      std::byte* slot = nullptr;
      {
        // Past its edges no copy reads the slot: it may grow.
        std::lock_guard lock(s_->mutex);
        auto& memory = s_->staging.at(op.staging_slot);
        if (memory.size() < bytes) memory.assign(bytes, poison);
        slot = memory.data();
      }
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

void HostRingExecutor::copy(const RingOp& op, std::size_t bytes, const std::vector<CopyPiece>& pieces) {
  if (s_->plan->to_host()) return copy_out(op, bytes, pieces);
  s_->submitted(op.ref);
  State* s = s_.get();
  std::shared_ptr<std::vector<std::byte>> to;
  {
    // As a GPU's executor does, the slot gets larger memory as the copy is
    // enqueued: the consumer takes the position's pointer before the copy
    // runs. Whoever reads the old memory holds it (Ring::Taken::memory).
    std::lock_guard lock(s->mutex);
    auto& memory = s->device.at(op.device_slot);
    if (memory->size() < bytes) memory = std::make_shared<std::vector<std::byte>>(bytes, poison);
    to = memory;
  }
  s_->copy_lane->enqueue([s, op, pieces, to] {
    s->perform(op, &s->copy_failed, [&] {
      std::byte* staged = nullptr;
      {
        std::lock_guard lock(s->mutex);
        if (s->plan->staged()) staged = s->staging.at(op.staging_slot).data();
      }
      for (const CopyPiece& piece : pieces)
        std::memcpy(piece.to ? piece.to : to->data() + piece.offset, piece.from ? piece.from : staged + piece.offset,
                    piece.bytes);
    });
  });
}

void HostRingExecutor::copy_out(const RingOp& op, std::size_t bytes, const std::vector<CopyPiece>& pieces) {
  s_->submitted(op.ref);
  State* s = s_.get();
  {
    // Past the slot's last drain (the ring waited for it) no one reads the slot: it may grow.
    std::lock_guard lock(s->mutex);
    if (s->plan->staged()) {
      auto& memory = s->staging.at(op.staging_slot);
      if (memory.size() < bytes) memory.assign(bytes, poison);
    }
  }
  s_->copy_lane->enqueue([s, op, pieces] {
    s->perform(op, &s->copy_failed, [&] {
      std::byte* staged = nullptr;
      {
        std::lock_guard lock(s->mutex);
        if (s->plan->staged()) staged = s->staging.at(op.staging_slot).data();
      }
      for (const CopyPiece& piece : pieces)
        // A piece of no bytes may have no memory (ToHostRing lets it): memcpy from null is undefined even for 0 bytes.
        if (piece.bytes > 0) std::memcpy(piece.to ? piece.to : staged + piece.offset, piece.from, piece.bytes);
    });
  });
}

void HostRingExecutor::mark(const RingOp& op, ConsumerLane) {
  s_->submitted(op.ref);
  State* s = s_.get();
  s_->consumer_lane->enqueue([s, op] { s->perform(op, &s->consumer_failed, {}); });
}

void HostRingExecutor::drain(const RingOp& op, std::size_t bytes, const Drain& drain) {
  s_->submitted(op.ref);
  // The drain's own exception reaches the drainer as it was thrown.
  std::exception_ptr thrown;
  auto done = std::make_shared<std::promise<std::optional<std::string>>>();
  auto result = done->get_future();
  s_->staging_lane->enqueue([&, done] {
    done->set_value(s_->perform(op, nullptr, [&] {
      std::span<const std::byte> staged;
      {
        std::lock_guard lock(s_->mutex);
        if (s_->plan->staged()) staged = {s_->staging.at(op.staging_slot).data(), bytes};
      }
      try {
        drain(staged);
      } catch (...) {
        thrown = std::current_exception();
        throw;
      }
    }));
  });
  if (const auto failed = result.get()) {
    if (thrown) std::rethrow_exception(thrown);
    throw std::runtime_error("host ring executor: " + *failed);
  }
}

void HostRingExecutor::transform(const RingOp& op, std::size_t bytes, const Transform& fn) {
  if (!op.active) return;
  s_->submitted(op.ref);
  State* s = s_.get();
  std::shared_ptr<std::vector<std::byte>> slot;
  bool ready_waits = true;
  {
    std::lock_guard lock(s->mutex);
    slot = s->device.at(op.device_slot);
    const RingOp ready = s->plan->op(op.ref.position, Step::ready);
    for (const RingEdge& e : ready)
      if (e.on == op.ref && !s->kept(ready, e)) ready_waits = false;
  }
  const std::size_t out_at = s->plan->out_offset(), out_bytes = s->plan->device_slot_bytes() - out_at;
  auto run = [s, op, bytes, fn, slot, out_at, out_bytes] {
    s->perform(op, &s->copy_failed, [&] {
      fn(nullptr, {slot->data(), bytes}, {slot->data() + out_at, out_bytes});
    });
  };
  // Ready waits for the transform because it comes after it on the copy
  // lane (as a kernel on the copy stream). With that edge left out, it runs
  // beside the lane, as a kernel on another stream would, and ready does not wait.
  (ready_waits ? s->copy_lane : s->side_lane)->enqueue(std::move(run));
}

void HostRingExecutor::detach(const RingOp& op) {
  std::lock_guard lock(s_->mutex);
  auto& memory = s_->device.at(op.device_slot);
  memory = std::make_shared<std::vector<std::byte>>(memory->size(), poison);
}

bool HostRingExecutor::copied(std::size_t position) const {
  std::lock_guard lock(s_->mutex);
  return s_->finished({position, Step::ready});
}

void HostRingExecutor::ready(const RingOp& op) {
  s_->submitted(op.ref);
  State* s = s_.get();
  s_->copy_lane->enqueue([s, op] { s->perform(op, &s->copy_failed, {}); });
}

void HostRingExecutor::take(const RingOp& op, ConsumerLane) {
  s_->submitted(op.ref);
  {
    std::lock_guard lock(s_->mutex);
    ++s_->idle.taken;
  }
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
  s_->changed.wait(lock, [&] { return s_->finished(op) || (s_->finishing && s_->run(op) == State::Run::none); });
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
  std::unique_ptr<engine::LaneThread> lanes[4];
  {
    std::lock_guard lock(s_->mutex);
    lanes[0] = std::move(s_->staging_lane);
    lanes[1] = std::move(s_->copy_lane);
    lanes[2] = std::move(s_->side_lane);
    lanes[3] = std::move(s_->consumer_lane);
  }
  for (auto& lane : lanes) lane.reset();
  std::lock_guard lock(s_->mutex);
  s_->device.clear();
  s_->staging.clear();
  s_->engine_plan.reset();
  s_->plan.reset();
}

HostRingExecutor::Holdings HostRingExecutor::holdings() const {
  Holdings h;
  std::lock_guard lock(s_->mutex);
  for (const auto& slot : s_->device) h.device_bytes += slot->size();
  for (const auto& slot : s_->staging) h.staging_bytes += slot.size();
  for (const auto* lane : {&s_->staging_lane, &s_->copy_lane, &s_->side_lane, &s_->consumer_lane})
    if (*lane) {
      ++h.lane_threads;
      h.pending += (*lane)->pending();
    }
  return h;
}

IdleTimes HostRingExecutor::idle() const {
  std::lock_guard lock(s_->mutex);
  return s_->idle;
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
