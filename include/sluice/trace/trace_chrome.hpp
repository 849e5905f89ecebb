#pragma once
// Chrome trace event format (JSON object form), which Perfetto and
// chrome://tracing open: one process per trace, one thread per lane and
// stream, one complete ("X") event per stage, the bound as an instant event.
// Host-only.
#include <span>
#include <string>

#include "sluice/trace/trace.hpp"

namespace sluice {

std::string chrome_trace_json(std::span<const Trace> traces, int indent = -1);

}  // namespace sluice
