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

// Per size, the fastest chunked copy-through, and its share of the link's
// best both ways at once (the bound's link term, link_rates_of): a reference
// for how much of the bound a chunked pipeline of that size can reach.
struct CopyThroughBest {
  std::size_t bytes = 0;
  std::size_t chunks = 0;  // of the fastest
  double gbps = 0;         // both directions together
  double link_gbps = 0;    // the fastest 'both ways pinned' of any size; 0 when not measured
  double of_link() const { return link_gbps > 0 ? gbps / link_gbps : 0.0; }
};
std::vector<CopyThroughBest> copy_through_best(const ProbeResult& result);

}  // namespace sluice::tools
