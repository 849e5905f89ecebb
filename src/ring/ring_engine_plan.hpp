#pragma once
// A ring's plan in the engine's plan format (engine/plan.hpp): its positions
// are the groups, its steps the steps; two rings of slots (staging, device),
// its reasons and lanes the domain's own (and a third to the host: the
// caller's device sources). To the device, the `ahead` edge waits only until
// the consumer has taken that far (submitted): the producer's lead, which
// orders nothing that runs. What the engine's checker and the host ring
// executor read. Host-only.
#include <string>

#include "engine/plan.hpp"
#include "ring/ring_plan.hpp"

namespace sluice::ring {

// To the host, `source` stands for the caller's device memory the copies
// read: `ahead` positions' worth at most, which the caller may reuse or free
// once their drains say so.
enum class SlotRing : std::uint8_t { staging, device, source };

class RingEnginePlan final : public engine::Plan {
 public:
  explicit RingEnginePlan(const RingPlan& plan) : p_(plan) {}

  static OpRef ref(engine::OpKey key) { return {key.group, static_cast<Step>(key.step)}; }
  static engine::OpKey key(OpRef ref) { return {ref.position, static_cast<std::uint8_t>(ref.step)}; }
  engine::Op form(const RingOp& op) const;

  std::uint8_t steps() const override { return step_count; }
  std::size_t first_group() const override { return p_.start(); }
  std::size_t groups() const override { return p_.positions(); }
  std::size_t ring_size(std::uint8_t ring) const override;
  engine::Op op(engine::OpKey key) const override { return form(p_.op(ref(key))); }
  std::string name(engine::OpKey key) const override;
  std::string ring_name(std::uint8_t ring) const override;
  std::string why_name(std::uint8_t why) const override;
  std::string describe(const engine::Violation& v) const override;

 private:
  void form_to_device(const RingOp& op, engine::Op& out) const;
  void form_to_host(const RingOp& op, engine::Op& out) const;

  const RingPlan& p_;
};

}  // namespace sluice::ring
