// A schedule's invariants (check) and its printed form (explain).
#include <algorithm>
#include <set>
#include <sstream>

#include "engine/plan_check.hpp"
#include "pipeline/schedule/schedule_plan.hpp"
#include "sluice/core/byte_size.hpp"
#include "sluice/pipeline/schedule.hpp"

namespace sluice {

namespace {

constexpr std::array<Stage, stage_count> all_stages{Stage::stage_in, Stage::h2d, Stage::compute, Stage::d2h,
                                                    Stage::stage_out};

// In check()'s messages, as the engine's checks name operations: "h2d of chunk 3".
std::string name(OpRef r) { return detail::SchedulePlan::name_of(r); }
// In explain()'s lines, short: "h2d 3".
std::string short_name(OpRef r) { return std::string(to_string(r.stage)) + " " + std::to_string(r.chunk); }

void check_rings(const Schedule& s, std::vector<std::string>& faults) {
  auto expect = [&](Ring ring, bool used) {
    if ((s.ring_size(ring) > 0) != used)
      faults.push_back(std::string(to_string(ring)) + " ring has " + std::to_string(s.ring_size(ring)) +
                       " slots but is " + (used ? "used" : "not used"));
  };
  expect(Ring::pinned_in, s.stages_in());
  expect(Ring::pinned_out, s.stages_out());
  expect(Ring::event_set, true);
  if (s.ring_size(Ring::device) != s.depth()) faults.push_back("device ring is not depth slots");
  if (s.stages_out() && s.ring_size(Ring::pinned_out) != s.depth() + 1)
    faults.push_back("pinned-out ring is not depth + 1 slots");
}

void check_submissions(const Schedule& s, std::vector<std::string>& faults) {
  const std::vector<OpRef> order = s.submission_order();
  std::vector<std::size_t> position(s.chunk_count() * stage_count, SIZE_MAX);
  for (std::size_t i = 0; i < order.size(); ++i) {
    std::size_t& at = position[order[i].index()];
    if (at != SIZE_MAX) faults.push_back(name(order[i]) + " is submitted twice");
    at = i;
  }
  for (std::size_t c = 0; c < s.chunk_count(); ++c) {
    std::size_t last = 0;
    for (Stage stage : {Stage::h2d, Stage::compute, Stage::d2h}) {
      const std::size_t at = position[OpRef{c, stage}.index()];
      if (at == SIZE_MAX) faults.push_back(name({c, stage}) + " is never submitted");
      else if (stage != Stage::h2d && at < last) faults.push_back(name({c, stage}) + " is submitted before the stage it follows");
      else last = at;
      if (c > 0 && at != SIZE_MAX && position[OpRef{c - 1, stage}.index()] > at)
        faults.push_back(name({c, stage}) + " is submitted before " + name({c - 1, stage}));
    }
  }
}

}  // namespace

std::vector<std::string> check(const Schedule& s, const EdgeFilter& keep) {
  std::vector<std::string> faults;
  check_rings(s, faults);
  check_submissions(s, faults);
  const detail::SchedulePlan plan(s);
  for (const engine::Violation& v : engine::check(plan, detail::keep_in_engine_terms(s, keep)))
    faults.push_back(plan.describe(v));
  return faults;
}

std::string explain(const Schedule& s, std::size_t chunks) {
  std::ostringstream out;
  const ChunkPlan& plan = s.plan();
  out << "schedule: " << plan.item_count() << " items in " << plan.chunk_count() << " chunks of up to "
      << plan.chunk_items() << (plan.is_ramped() ? " (ramped)" : "") << ", depth " << s.depth() << ", "
      << s.compute_streams() << " compute stream" << (s.compute_streams() > 1 ? "s" : "") << "\n";
  for (std::size_t k = 0; k < s.spans().size(); ++k) {
    const SpanShape& span = s.spans()[k];
    out << "  span " << k << ": " << (span.role == SpanRole::input ? "input" : span.role == SpanRole::output ? "output" : "inout")
        << ", " << to_string(span.path) << ", " << span.item_bytes << "-byte items, slots of "
        << format_bytes(s.slot_bytes(k)) << "\n";
  }
  out << "  rings:";
  for (Ring ring : {Ring::pinned_in, Ring::device, Ring::pinned_out, Ring::event_set})
    if (s.ring_size(ring) > 0) out << " " << to_string(ring) << " " << s.ring_size(ring);
  out << " (slots per span; event sets per run)\n";
  if (s.chunk_count() > 0)
    out << "  H2D copies run up to " << s.last_h2d_with(0) << " chunks ahead of the kernels\n";
  std::set<std::size_t> shown;
  for (std::size_t c = 0; c < std::min(chunks, s.chunk_count()); ++c) shown.insert(c);
  if (s.chunk_count() > 0) shown.insert(s.chunk_count() - 1);
  std::size_t last_shown = 0;
  for (std::size_t c : shown) {
    if (c > last_shown + 1) out << "  ...\n";
    last_shown = c;
    const ItemRange r = plan.chunk(c);
    out << "chunk " << c << ": items " << r.begin << ".." << r.end << "\n";
    for (Stage stage : all_stages) {
      const Op op = s.op(c, stage);
      if (!op.active && op.waits.empty()) continue;
      std::ostringstream line;
      line << "  " << to_string(stage);
      if (stage == Stage::compute && s.compute_streams() > 1) line << " (stream " << op.stream << ")";
      if (!op.active) line << " (inactive)";
      std::string text = line.str();
      text.resize(std::max<std::size_t>(text.size(), 22), ' ');
      out << text;
      for (const SlotUse& u : op.slots)
        out << " " << (u.access == Access::read ? "reads " : u.access == Access::write ? "writes " : "updates ")
            << to_string(u.ring) << "[" << u.slot << "]";
      if (!op.waits.empty()) {
        out << "; after";
        for (std::size_t i = 0; i < op.waits.size(); ++i)
          out << (i ? ", " : " ") << short_name(op.waits[i].on) << " (" << to_string(op.waits[i].why) << ")";
      }
      if (op.after_caller) out << "; after the caller's stream";
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace sluice
