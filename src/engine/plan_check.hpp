#pragma once
// The one checker of a plan (plan.hpp): statically, every operation against
// the three rules before anything runs; and as an executor starts each
// operation, against how far every other one has run. Host-only.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/plan.hpp"

namespace sluice::engine {

// How far an operation has run.
enum class Progress : std::uint8_t { none, submitted, started, done, failed };
constexpr bool settled(Progress p) { return p == Progress::done || p == Progress::failed; }

// Every operation of the groups from the plan's first, at most `groups` of
// them (a plan with no end must say how far: std::invalid_argument): its edges wait on
// operations before it, its slots are its group's, and kept edges and lane
// order put each write after every use of the slot's previous contents and
// each read after the writes it reads. `keep` leaves edges out, to show what
// each one guards.
std::vector<Violation> check(const Plan& plan, const KeepEdge& keep = {}, std::size_t groups = SIZE_MAX);

// As `op` starts: every edge's operation has finished (or, for an edge until
// submitted, was submitted), every use of the slots it writes by their
// previous group is settled, and every earlier write of its group that it
// reads is settled. Appends what it finds to `out`.
using ProgressOf = std::function<Progress(OpKey)>;
void check_start(const Plan& plan, const Op& op, const ProgressOf& progress, std::vector<Violation>& out);

}  // namespace sluice::engine
