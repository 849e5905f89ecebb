#pragma once
// A compact timeline for a terminal: one text row per lane and stream,
// '#' where the engine was busy most of a cell, '+' where partly, then the
// figures analyze() derives. Host-only.
#include <string>

#include "sluice/trace/trace.hpp"

namespace sluice {

std::string terminal_timeline(const Trace& trace, int columns = 64);

}  // namespace sluice
