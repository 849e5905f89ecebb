#include "pipeline/schedule/schedule_plan.hpp"

namespace sluice::detail {

namespace {

static_assert(static_cast<int>(Access::read_write) == static_cast<int>(engine::Access::read_write) &&
              static_cast<int>(Access::write) == static_cast<int>(engine::Access::write));

// The operation before `op` on its lane, for lanes that run one at a time in
// chunk order: each copy engine, each compute stream, the drain. Stage-in
// has none: the staging threads may overlap its operations.
std::optional<OpRef> lane_predecessor(const Schedule& s, const Op& op) {
  const std::size_t c = op.ref.chunk;
  switch (op.ref.stage) {
    case Stage::stage_in: return std::nullopt;
    case Stage::compute:
      if (c >= s.compute_streams()) return OpRef{c - s.compute_streams(), Stage::compute};
      return std::nullopt;
    default:
      if (c >= 1) return OpRef{c - 1, op.ref.stage};
      return std::nullopt;
  }
}

}  // namespace

engine::Op SchedulePlan::form(const Op& op) const {
  engine::Op out;
  out.key = key(op.ref);
  out.lane = static_cast<std::uint8_t>(op.lane);
  if (const auto before = lane_predecessor(s_, op)) out.after = key(*before);
  for (const SlotUse& u : op.slots)
    out.slots.push({static_cast<std::uint8_t>(u.ring), u.slot, static_cast<engine::Access>(u.access)});
  for (const Edge& e : op.waits) out.edges.push({key(e.on), static_cast<std::uint8_t>(e.why), engine::Until::finished});
  return out;
}

std::string SchedulePlan::name_of(OpRef r) { return std::string(to_string(r.stage)) + " of chunk " + std::to_string(r.chunk); }
std::string SchedulePlan::name(engine::OpKey k) const { return name_of(ref(k)); }
std::string SchedulePlan::ring_name(std::uint8_t ring) const { return std::string(to_string(static_cast<Ring>(ring))); }
std::string SchedulePlan::why_name(std::uint8_t why) const { return std::string(to_string(static_cast<Reason>(why))); }

engine::KeepEdge keep_in_engine_terms(const Schedule& schedule, const EdgeFilter& keep) {
  if (!keep) return {};
  return [&schedule, keep](const engine::Op& op, const engine::Edge& e) {
    return keep(schedule.op(SchedulePlan::ref(op.key)),
                Edge{SchedulePlan::ref(e.on), static_cast<Reason>(e.why)});
  };
}

}  // namespace sluice::detail
