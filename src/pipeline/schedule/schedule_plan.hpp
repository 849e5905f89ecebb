#pragma once
// A pipeline's schedule in the engine's plan format (engine/plan.hpp): its
// chunks are the groups, its stages the steps, its rings, reasons and lanes
// the domain's own. What the engine's checker and the host executor read.
// Host-only.
#include <string>

#include "engine/plan.hpp"
#include "sluice/pipeline/schedule.hpp"

namespace sluice::detail {

class SchedulePlan final : public engine::Plan {
 public:
  explicit SchedulePlan(const Schedule& schedule) : s_(schedule) {}

  static OpRef ref(engine::OpKey key) { return {key.group, static_cast<Stage>(key.step)}; }
  static engine::OpKey key(OpRef ref) { return {ref.chunk, static_cast<std::uint8_t>(ref.stage)}; }
  // The operation in the engine's form: its edges, slots and the one before it on its lane.
  engine::Op form(const Op& op) const;

  std::uint8_t steps() const override { return stage_count; }
  std::size_t groups() const override { return s_.chunk_count(); }
  std::size_t ring_size(std::uint8_t ring) const override { return s_.ring_size(static_cast<Ring>(ring)); }
  engine::Op op(engine::OpKey key) const override { return form(s_.op(ref(key))); }
  std::string name(engine::OpKey key) const override;
  static std::string name_of(OpRef ref);  // "h2d of chunk 3"
  std::string ring_name(std::uint8_t ring) const override;
  std::string why_name(std::uint8_t why) const override;

 private:
  const Schedule& s_;
};

// An edge filter of the schedule's terms (host_executor.hpp, check()) over the engine's form.
engine::KeepEdge keep_in_engine_terms(const Schedule& schedule, const EdgeFilter& keep);

}  // namespace sluice::detail
