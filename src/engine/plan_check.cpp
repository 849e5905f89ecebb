#include "engine/plan_check.hpp"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

namespace sluice::engine {

std::string Plan::describe(const Violation& v) const {
  const std::string slot = ring_name(v.use.ring) + " slot " + std::to_string(v.use.slot);
  switch (v.kind) {
    case Violation::Kind::edge_backwards:
      return name(v.op) + " waits on " + name(v.edge.on) + ", which does not come before it";
    case Violation::Kind::wrong_slot: return name(v.op) + " uses " + slot + ", not its own group's";
    case Violation::Kind::may_overwrite:
      return name(v.op) + " may overwrite " + slot + " while " + name(v.other) + " still uses it";
    case Violation::Kind::may_read_early:
      return name(v.op) + " may read " + slot + " before " + name(v.other) + " has written it";
    case Violation::Kind::started_early:
      return name(v.op) + " started before " + name(v.edge.on) +
             (v.edge.until == Until::submitted ? " was submitted (" : " had finished (") + why_name(v.edge.why) + ")";
    case Violation::Kind::overwrote:
      return name(v.op) + " wrote " + slot + " while " + name(v.other) + " still used its previous contents";
    case Violation::Kind::read_early: return name(v.op) + " read " + slot + " before " + name(v.other) + " had written it";
  }
  return name(v.op) + ": a broken rule";
}

namespace {

// Whether `before` is done whenever `after` starts: a path of kept edges
// (until finished) and lane order from `after` back to `before`. Edges and
// lane order only point to the same or earlier groups, so the search never
// goes below before's group.
class HappensBefore {
 public:
  HappensBefore(const Plan& plan, const KeepEdge& keep) : plan_(plan), keep_(keep) {}

  bool operator()(OpKey before, OpKey after) const {
    if (before == after) return false;
    std::vector<OpKey> todo{after};
    std::unordered_set<std::size_t> seen{plan_.index(after)};
    while (!todo.empty()) {
      const Op op = plan_.op(todo.back());
      todo.pop_back();
      auto reaches = [&](OpKey k) {
        if (k.group < before.group || !seen.insert(plan_.index(k)).second) return false;
        if (k == before) return true;
        todo.push_back(k);
        return false;
      };
      for (const Edge& e : op.edges)
        if (e.until == Until::finished && (!keep_ || keep_(op, e)) && reaches(e.on)) return true;
      if (op.after && reaches(*op.after)) return true;
    }
    return false;
  }

 private:
  const Plan& plan_;
  const KeepEdge& keep_;
};

// The operations of the group before `op`'s in the ring of `use` that use that ring, if it ran.
template <typename Visit>
void previous_uses(const Plan& plan, const Op& op, const SlotUse& use, Visit visit) {
  const std::size_t size = plan.ring_size(use.ring);
  if (size == 0 || op.key.group < plan.first_group() + size) return;
  const std::size_t previous = op.key.group - size;
  for (std::uint8_t s = 0; s < plan.steps(); ++s) {
    const Op other = plan.op({previous, s});
    if (std::any_of(other.slots.begin(), other.slots.end(), [&](const SlotUse& u) { return u.ring == use.ring; }))
      if (!visit(other.key)) return;
  }
}

// The earlier operations of `op`'s group that write the slot of `use`.
template <typename Visit>
void earlier_writes(const Plan& plan, const Op& op, const SlotUse& use, Visit visit) {
  for (std::uint8_t s = 0; s < op.key.step; ++s) {
    const Op other = plan.op({op.key.group, s});
    if (std::any_of(other.slots.begin(), other.slots.end(),
                    [&](const SlotUse& u) { return u.ring == use.ring && writes(u.access); }))
      if (!visit(other.key)) return;
  }
}

}  // namespace

std::vector<Violation> check(const Plan& plan, const KeepEdge& keep, std::size_t groups) {
  std::vector<Violation> found;
  const HappensBefore ordered(plan, keep);
  const std::size_t first = plan.first_group();
  if (plan.groups() == Plan::no_end && groups == SIZE_MAX)
    throw std::invalid_argument("engine::check: a plan with no end is checked as far as asked");
  const std::size_t end = groups >= plan.groups() - first ? plan.groups() : first + groups;
  for (std::size_t g = first; g < end; ++g)
    for (std::uint8_t s = 0; s < plan.steps(); ++s) {
      const Op op = plan.op({g, s});
      for (const Edge& e : op.edges)
        if (e.on.group > g || (e.on.group == g && e.on.step >= s))
          found.push_back({Violation::Kind::edge_backwards, op.key, e, {}, {}});
      for (const SlotUse& use : op.slots) {
        const std::size_t size = plan.ring_size(use.ring);
        if (size == 0 || use.slot != g % size) {
          found.push_back({Violation::Kind::wrong_slot, op.key, {}, use, {}});
          continue;
        }
        if (reads(use.access))
          earlier_writes(plan, op, use, [&](OpKey w) {
            if (!ordered(w, op.key)) found.push_back({Violation::Kind::may_read_early, op.key, {}, use, w});
            return true;
          });
        if (writes(use.access))
          previous_uses(plan, op, use, [&](OpKey u) {
            if (!ordered(u, op.key)) found.push_back({Violation::Kind::may_overwrite, op.key, {}, use, u});
            return true;
          });
      }
    }
  return found;
}

void check_start(const Plan& plan, const Op& op, const ProgressOf& progress, std::vector<Violation>& out) {
  for (const Edge& e : op.edges) {
    const Progress p = progress(e.on);
    if (e.until == Until::submitted ? p == Progress::none : !settled(p))
      out.push_back({Violation::Kind::started_early, op.key, e, {}, {}});
  }
  for (const SlotUse& use : op.slots) {
    if (writes(use.access))
      previous_uses(plan, op, use, [&](OpKey u) {
        if (settled(progress(u))) return true;
        out.push_back({Violation::Kind::overwrote, op.key, {}, use, u});
        return false;  // the first use still pending says it
      });
    if (reads(use.access))
      earlier_writes(plan, op, use, [&](OpKey w) {
        if (settled(progress(w))) return true;
        out.push_back({Violation::Kind::read_early, op.key, {}, use, w});
        return false;
      });
  }
}

}  // namespace sluice::engine
