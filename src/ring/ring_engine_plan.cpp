#include "ring/ring_engine_plan.hpp"

#include <fmt/format.h>

namespace sluice::ring {

namespace {

constexpr auto staging = static_cast<std::uint8_t>(SlotRing::staging);
constexpr auto device = static_cast<std::uint8_t>(SlotRing::device);
constexpr auto source = static_cast<std::uint8_t>(SlotRing::source);

}  // namespace

engine::Op RingEnginePlan::form(const RingOp& op) const {
  engine::Op out;
  out.key = key(op.ref);
  out.lane = static_cast<std::uint8_t>(op.lane);
  if (!op.active) return out;
  if (p_.to_host()) {
    form_to_host(op, out);
  } else {
    form_to_device(op, out);
  }
  for (const RingEdge& e : op)
    out.edges.push({key(e.on), static_cast<std::uint8_t>(e.why),
                    e.why == Why::ahead && !p_.to_host() ? engine::Until::submitted : engine::Until::finished});
  return out;
}

// To the host, the caller's device memory is a ring of `ahead` sources:
// the caller's work writes one (mark: its bytes are made), the copy reads it,
// and the caller may use it again `ahead` positions later, once the drain
// there says the copy is done. So the `ahead` edge waits until that drain
// has finished, not only been asked for.
void RingEnginePlan::form_to_host(const RingOp& op, engine::Op& out) const {
  const std::size_t p = op.ref.position;
  const bool has_previous = p > p_.start();
  switch (op.ref.step) {
    case Step::mark:
      out.slots.push({source, op.source_slot, engine::Access::write});
      if (has_previous) out.after = key({p - 1, Step::mark});
      break;
    case Step::copy:
      out.slots.push({source, op.source_slot, engine::Access::read});
      if (p_.staged()) out.slots.push({staging, op.staging_slot, engine::Access::write});
      if (has_previous) out.after = key({p - 1, Step::ready});
      break;
    case Step::ready: out.after = key({p, Step::copy}); break;
    case Step::drain:
      if (p_.staged()) out.slots.push({staging, op.staging_slot, engine::Access::read});
      if (has_previous) out.after = key({p - 1, Step::drain});
      break;
    default: break;
  }
}

void RingEnginePlan::form_to_device(const RingOp& op, engine::Op& out) const {
  const std::size_t p = op.ref.position;
  const bool has_previous = p > p_.start();
  switch (op.ref.step) {
    case Step::stage:
      if (!op.active) break;
      out.slots.push({staging, op.staging_slot, engine::Access::write});
      if (has_previous) out.after = key({p - 1, Step::stage});  // the producer stages one position at a time
      break;
    case Step::copy:
      if (p_.staged()) out.slots.push({staging, op.staging_slot, engine::Access::read});
      out.slots.push({device, op.device_slot, engine::Access::write});
      if (has_previous) out.after = key({p - 1, Step::ready});
      break;
    case Step::transform:
      if (!op.active) break;
      out.slots.push({device, op.device_slot, engine::Access::read_write});
      out.after = key({p, Step::copy});
      break;
    // Ready follows the copy on the copy lane. A transform runs between them
    // there, or beside the lane where its edge is left out: the data edge, not
    // lane order, is what puts ready after it.
    case Step::ready: out.after = key({p, Step::copy}); break;
    case Step::take:
      out.slots.push({device, op.device_slot, engine::Access::read});
      if (has_previous) out.after = key({p - 1, Step::take});
      break;
    case Step::release: out.slots.push({device, op.device_slot, engine::Access::read}); break;
    default: break;
  }
}

std::size_t RingEnginePlan::ring_size(std::uint8_t ring) const {
  if (ring == source) return p_.to_host() ? p_.ahead() : 0;
  return ring == device ? p_.slots() : p_.staging_slots();
}

std::string RingEnginePlan::name(engine::OpKey k) const {
  return fmt::format("position {} {}", k.group, to_string(ref(k).step));
}

std::string RingEnginePlan::ring_name(std::uint8_t ring) const {
  return ring == device ? "device" : ring == source ? "source" : "staging";
}

std::string RingEnginePlan::why_name(std::uint8_t why) const { return std::string(to_string(static_cast<Why>(why))); }

std::string RingEnginePlan::describe(const engine::Violation& v) const {
  using Kind = engine::Violation::Kind;
  const std::string at = name(v.op);
  const std::string slot = fmt::format("{} slot {}", ring_name(v.use.ring), v.use.slot);
  switch (v.kind) {
    case Kind::started_early:
      return fmt::format("{}: starts before the {} of position {} ({})", at, to_string(ref(v.edge.on).step),
                         v.edge.on.group, why_name(v.edge.why));
    case Kind::overwrote:
      if (v.use.ring == device)
        return fmt::format("{}: {} overwritten while position {} is not released", at, slot, v.other.group);
      return ref(v.other).step == Step::copy
                 ? fmt::format("{}: {} overwritten while its copy of position {} is pending", at, slot, v.other.group)
                 : fmt::format("{}: {} overwritten while the {} of position {} is pending", at, slot,
                               to_string(ref(v.other).step), v.other.group);
    case Kind::read_early:
      return fmt::format("{}: {} read before the {} of position {} had written it", at, slot,
                         to_string(ref(v.other).step), v.other.group);
    default: return Plan::describe(v);
  }
}

}  // namespace sluice::ring
