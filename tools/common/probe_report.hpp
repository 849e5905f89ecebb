#pragma once
// How `sluice probe` prints what it measured, and reads it back: tables for
// a terminal, JSON for machines (and for `sluice model` on a machine with no
// GPU). Tool code, not part of the installed library.
#include <string>

#include "bound/link_rates.hpp"
#include "sluice/measure/model.hpp"
#include "sluice/measure/probe_result.hpp"

namespace sluice::tools {

// Capabilities, GB/s by size and source, registration cost, host copy
// scaling, fixed costs in microseconds.
std::string probe_text(const ProbeResult& result);
// The same, every summary in full.
std::string probe_json(const ProbeResult& result, int indent = 2);
// Reads what probe_json wrote. Throws std::invalid_argument naming what is missing or malformed.
ProbeResult probe_from_json(const std::string& text);

// The link at its best in a probe: the fastest pinned figure of each
// direction and of both at once, over every size measured.
LinkRates link_rates_of(const ProbeResult& result);
// Every rate the model needs: the link, and the staging threads' rates.
EngineRates engine_rates_of(const ProbeResult& result);
// The fixed costs the probe measured for the model; defaults for those it lacks.
FixedCosts fixed_costs_of(const ProbeResult& result);

}  // namespace sluice::tools
