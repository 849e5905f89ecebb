// A schedule's invariants (check) and its printed form (explain).
#include <algorithm>
#include <set>
#include <sstream>
#include <unordered_set>

#include "sluice/core/byte_size.hpp"
#include "sluice/pipeline/schedule.hpp"

namespace sluice {

namespace {

constexpr std::array<Stage, stage_count> all_stages{Stage::stage_in, Stage::h2d, Stage::compute, Stage::d2h,
                                                    Stage::stage_out};

std::string name(OpRef r) { return std::string(to_string(r.stage)) + " " + std::to_string(r.chunk); }

// The operation before `op` on its lane, for lanes that run one at a time in chunk order.
std::optional<OpRef> lane_predecessor(const Schedule& s, const Op& op) {
  const std::size_t c = op.ref.chunk;
  switch (op.ref.stage) {
    case Stage::stage_in: return std::nullopt;  // the staging threads may overlap them
    case Stage::compute:
      if (c >= s.compute_streams()) return OpRef{c - s.compute_streams(), Stage::compute};
      return std::nullopt;
    default:
      if (c >= 1) return OpRef{c - 1, op.ref.stage};
      return std::nullopt;
  }
}

class HappensBefore {
 public:
  HappensBefore(const Schedule& s, const EdgeFilter& keep) : s_(s), keep_(keep) {}

  // Whether `before` is done whenever `after` starts: a path of kept edges
  // and lane order from `after` back to `before`. Edges only point to the
  // same or earlier chunks, so the search never goes below before's chunk.
  bool operator()(OpRef before, OpRef after) const {
    if (before == after) return false;
    std::vector<OpRef> todo{after};
    std::unordered_set<std::size_t> seen{after.index()};
    while (!todo.empty()) {
      const Op op = s_.op(todo.back());
      todo.pop_back();
      auto visit = [&](OpRef r) {
        if (r.chunk < before.chunk || !seen.insert(r.index()).second) return false;
        if (r == before) return true;
        todo.push_back(r);
        return false;
      };
      for (const Edge& e : op.waits)
        if ((!keep_ || keep_(op, e)) && visit(e.on)) return true;
      if (const auto prev = lane_predecessor(s_, op); prev && visit(*prev)) return true;
    }
    return false;
  }

 private:
  const Schedule& s_;
  const EdgeFilter& keep_;
};

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
  const HappensBefore before(s, keep);
  for (std::size_t c = 0; c < s.chunk_count(); ++c)
    for (Stage stage : all_stages) {
      const Op op = s.op(c, stage);
      for (const Edge& e : op.waits)
        if (e.on.chunk > c || (e.on.chunk == c && e.on.stage >= stage))
          faults.push_back(name(op.ref) + " waits on " + name(e.on) + ", which does not come before it");
      for (const SlotUse& use : op.slots) {
        const std::size_t size = s.ring_size(use.ring);
        if (size == 0 || use.slot != c % size) {
          faults.push_back(name(op.ref) + " uses " + std::string(to_string(use.ring)) + " slot " +
                           std::to_string(use.slot) + ", not its chunk's");
          continue;
        }
        // A read comes after the chunk's earlier writes of the slot.
        if (reads(use.access))
          for (Stage earlier : all_stages) {
            if (earlier >= stage) break;
            for (const SlotUse& w : s.op(c, earlier).slots)
              if (w.ring == use.ring && writes(w.access) && !before({c, earlier}, op.ref))
                faults.push_back(name(op.ref) + " may read " + std::string(to_string(use.ring)) + " slot " +
                                 std::to_string(use.slot) + " before " + name({c, earlier}) + " has written it");
          }
        // A write comes after every use of the slot's previous contents.
        if (writes(use.access) && c >= size) {
          const std::size_t previous = c - size;
          for (Stage other : all_stages)
            for (const SlotUse& u : s.op(previous, other).slots)
              if (u.ring == use.ring && !before({previous, other}, op.ref))
                faults.push_back(name(op.ref) + " may overwrite " + std::string(to_string(use.ring)) + " slot " +
                                 std::to_string(use.slot) + " while " + name({previous, other}) + " still uses it");
        }
      }
    }
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
          out << (i ? ", " : " ") << name(op.waits[i].on) << " (" << to_string(op.waits[i].why) << ")";
      }
      if (op.after_caller) out << "; after the caller's stream";
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace sluice
