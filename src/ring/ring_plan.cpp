#include "ring/ring_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "ring/layer_steps.hpp"
#include "sluice/core/ahead.hpp"

namespace sluice::ring {

std::string_view to_string(Order order) { return order == Order::batches ? "batches" : "layers"; }

std::string_view to_string(Step step) {
  switch (step) {
    case Step::stage: return "stage";
    case Step::copy: return "copy";
    case Step::transform: return "transform";
    case Step::ready: return "ready";
    case Step::take: return "take";
    case Step::release: return "release";
    case Step::mark: return "mark";
    case Step::drain: return "drain";
  }
  return "?";
}

std::string_view to_string(Direction direction) { return direction == Direction::to_device ? "to the device" : "to the host"; }

bool in_direction(Step step, Direction direction) {
  const bool to_host_step = step == Step::mark || step == Step::drain;
  const bool both = step == Step::copy || step == Step::ready;
  return both || to_host_step == (direction == Direction::to_host);
}

std::string_view to_string(Lane lane) {
  switch (lane) {
    case Lane::host: return "host";
    case Lane::copy: return "copy";
    case Lane::consumer: return "consumer";
  }
  return "?";
}

std::string_view to_string(Why why) {
  switch (why) {
    case Why::data: return "data";
    case Why::ahead: return "ahead";
    case Why::staging_slot: return "staging slot";
    case Why::device_slot: return "device slot";
  }
  return "?";
}

RingPlan::RingPlan(RingOptions options) : o_(options) {
  if (o_.items == 0) throw std::invalid_argument("ring: no items to hand out");
  if (o_.steps == 0) throw std::invalid_argument("ring: steps must be at least 1");
  if (o_.ahead == 0) throw std::invalid_argument("ring: ahead must be at least 1 position");
  if (o_.ahead > most_ahead)
    throw std::invalid_argument(fmt::format("ring: ahead must be at most {} positions (sluice::most_ahead)", most_ahead));
  if (o_.held == 0) throw std::invalid_argument("ring: the consumer holds at least the position it took last");
  if (o_.slot_bytes == 0 && o_.items != RingOptions::unbounded) throw std::invalid_argument("ring: a slot of 0 bytes");
  if (o_.out_bytes > SIZE_MAX / 2 || o_.slot_bytes > SIZE_MAX / 2) throw std::invalid_argument("ring: slots too large");
  if (o_.items == RingOptions::unbounded && (o_.order != Order::batches || o_.steps != 1))
    throw std::invalid_argument("ring: an unbounded ring hands out batches, once");
  if (o_.direction == Direction::to_host) {
    to_host_slots();
  } else {
    to_device_slots();
  }
  const std::size_t per_step = layer_positions(o_.items, o_.order == Order::layers);
  if (per_step > SIZE_MAX / o_.steps) throw std::invalid_argument("ring: too many positions");
  positions_ = per_step * o_.steps;
  if (o_.start >= positions_)
    throw std::invalid_argument(fmt::format("ring: start position {} is past the last position {}", o_.start, positions_ - 1));
}

void RingPlan::to_host_slots() {
  // What the caller's work makes comes back as it was made: no device slot
  // holds it, and no transform runs on the way.
  if (o_.slots != 0) throw std::invalid_argument("ring: a ring to the host has no device slots (the caller's memory is read)");
  if (o_.out_bytes != 0) throw std::invalid_argument("ring: a ring to the host has no transform");
  if (o_.order != Order::batches) throw std::invalid_argument("ring: a ring to the host carries items in the order they are made");
  // A staging slot past `ahead` would never be used: the caller waits for
  // the drain `ahead` positions back before it marks another.
  if (o_.staging_slots > o_.ahead)
    throw std::invalid_argument(fmt::format("ring: {} staging slots for ahead {}: at most {} positions are in flight",
                                            o_.staging_slots, o_.ahead, o_.ahead));
  slots_ = 0;
  staging_ = !o_.staged ? 0 : o_.staging_slots == 0 ? o_.ahead : o_.staging_slots;
}

void RingPlan::to_device_slots() {
  slots_ = o_.slots == 0 ? o_.ahead + o_.held : o_.slots;
  // With `ahead` positions in flight beyond the `held` ones the consumer
  // holds, fewer slots would make the producer's copies wait on the
  // consumer's releases: the lead that `ahead` asks for could never be had.
  if (slots_ < o_.ahead + o_.held)
    throw std::invalid_argument(fmt::format("ring: {} device slots cannot hold ahead {} positions and the {} the consumer holds: "
                                            "give at least {} slots",
                                            slots_, o_.ahead, o_.held, o_.ahead + o_.held));
  if (o_.staging_slots > slots_)
    throw std::invalid_argument(fmt::format("ring: {} staging slots for {} device slots: a staging slot feeds one device slot at a time",
                                            o_.staging_slots, slots_));
  staging_ = !o_.staged ? 0 : o_.staging_slots == 0 ? slots_ : o_.staging_slots;
}

std::size_t RingPlan::item(std::size_t p) const {
  if (p >= positions_) throw std::out_of_range(fmt::format("ring: position {} past the last {}", p, positions_ - 1));
  if (o_.order == Order::batches) return p % o_.items;
  return layer_step(p, o_.items, true).layer;
}

RingOp RingPlan::op(OpRef ref) const {
  RingOp op;
  op.ref = ref;
  op.item = item(ref.position);
  op.device_slot = to_host() ? 0 : device_slot(ref.position);
  op.staging_slot = staging_slot(ref.position);
  op.source_slot = to_host() ? source_slot(ref.position) : 0;
  const std::size_t p = ref.position;
  // An edge on an operation before the start never runs: it is left out.
  auto wait = [&](std::size_t back, Step step, Why why) {
    if (p >= o_.start + back) op.edges[op.edge_count++] = {{p - back, step}, why};
  };
  if (!in_direction(ref.step, o_.direction)) {
    op.active = false;
    return op;
  }
  if (to_host()) {
    to_host_op(op, wait);
    return op;
  }
  switch (ref.step) {
    case Step::stage:
      op.lane = Lane::host;
      op.active = o_.staged;
      if (o_.staged) {
        wait(o_.ahead, Step::take, Why::ahead);
        wait(staging_, Step::copy, Why::staging_slot);
      }
      break;
    case Step::copy:
      op.lane = Lane::copy;
      if (o_.staged)
        wait(0, Step::stage, Why::data);
      else
        wait(o_.ahead, Step::take, Why::ahead);
      wait(slots_, Step::release, Why::device_slot);
      break;
    case Step::transform:
      op.lane = Lane::copy;
      op.active = transformed();
      if (op.active) wait(0, Step::copy, Why::data);
      break;
    case Step::ready:
      op.lane = Lane::copy;
      wait(0, transformed() ? Step::transform : Step::copy, Why::data);
      break;
    case Step::take:
      op.lane = Lane::consumer;
      wait(0, Step::ready, Why::data);
      break;
    case Step::release:
      op.lane = Lane::consumer;
      wait(0, Step::take, Why::data);
      break;
    default: break;
  }
  return op;
}

template <typename Wait>
void RingPlan::to_host_op(RingOp& op, Wait& wait) const {
  switch (op.ref.step) {
    case Step::mark:
      op.lane = Lane::consumer;
      wait(o_.ahead, Step::drain, Why::ahead);
      break;
    case Step::copy:
      op.lane = Lane::copy;
      wait(0, Step::mark, Why::data);
      if (o_.staged) wait(staging_, Step::drain, Why::staging_slot);
      break;
    case Step::ready:
      op.lane = Lane::copy;
      wait(0, Step::copy, Why::data);
      break;
    case Step::drain:
      op.lane = Lane::host;
      wait(0, Step::ready, Why::data);
      break;
    default: break;
  }
}

namespace {

std::string to_host_place(const RingPlan& plan, const RingOp& op) {
  const std::string host = plan.staged() ? fmt::format("staging[{}]", op.staging_slot) : "the caller's memory";
  switch (op.ref.step) {
    case Step::mark: return fmt::format("item {} -> source[{}]", op.item, op.source_slot);
    case Step::copy: return fmt::format("source[{}] -> {}", op.source_slot, host);
    case Step::drain: return host;
    default: return fmt::format("source[{}]", op.source_slot);
  }
}

std::string describe(const RingPlan& plan, const RingOp& op) {
  std::string where;
  switch (op.ref.step) {
    case Step::stage: where = op.active ? fmt::format("item {} -> staging[{}]", op.item, op.staging_slot) : "(unstaged)"; break;
    case Step::copy:
      where = plan.staged() ? fmt::format("staging[{}] -> device[{}]", op.staging_slot, op.device_slot)
                            : fmt::format("item {} -> device[{}]", op.item, op.device_slot);
      break;
    case Step::transform:
      where = fmt::format("device[{}] -> its out", op.device_slot);
      break;
    default: where = fmt::format("device[{}]", op.device_slot); break;
  }
  if (plan.to_host()) where = to_host_place(plan, op);
  std::string line = fmt::format("  {:>5} {:<9} {:<9} {:<26}", op.ref.position, to_string(op.ref.step), to_string(op.lane), where);
  // A place wider than its column (to the host: "source[0] -> the caller's memory") would run into its edges.
  const char* sep = line.back() == ' ' ? "after " : " after ";
  for (const RingEdge& e : op) {
    line += fmt::format("{}{} {} ({})", sep, to_string(e.on.step), e.on.position, to_string(e.why));
    sep = ", ";
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line + "\n";
}

}  // namespace

std::string explain(const RingPlan& plan, std::size_t shown) {
  const RingOptions& o = plan.options();
  std::string out = plan.unbounded() ? fmt::format("ring: batches until the producer ends, from position {}\n", plan.start()) : fmt::format("ring: {} positions ({} of {} item{}, {} step{}), from position {}\n", plan.positions(),
                                to_string(o.order), o.items, o.items == 1 ? "" : "s", o.steps, o.steps == 1 ? "" : "s",
                                plan.start());
  if (plan.to_host())
    out += fmt::format("  to the host: ahead {}", plan.ahead());
  else
    out += fmt::format("  ahead {}, held {}, {} device slots", plan.ahead(), plan.held(), plan.slots());
  out += plan.staged() ? fmt::format(", {} staging slots", plan.staging_slots()) : std::string(", unstaged");
  out += fmt::format(" of {} bytes", plan.slot_bytes());
  if (plan.transformed()) out += fmt::format(", a transform into {} bytes at offset {} of each device slot", o.out_bytes, plan.out_offset());
  if (plan.timed()) out += ", timed";
  out += "\n";
  auto position = [&](std::size_t p) {
    for (std::size_t s = 0; s < step_count; ++s) {
      const RingOp op = plan.op(p, static_cast<Step>(s));
      if (op.active) out += describe(plan, op);
    }
  };
  const std::size_t end = plan.start() + std::min(shown, plan.positions() - plan.start());
  for (std::size_t p = plan.start(); p < end; ++p) position(p);
  if (end < plan.positions() && !plan.unbounded()) {
    if (end + 1 < plan.positions()) out += "  ...\n";
    position(plan.positions() - 1);
  }
  return out;
}

}  // namespace sluice::ring
