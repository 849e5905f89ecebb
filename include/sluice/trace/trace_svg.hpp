#pragma once
// An SVG timeline, like a profiler's view: one lane per engine (a row per
// stream within it), one bar per chunk's stage, a time axis in ms, the bound
// as a dashed marker, and a legend. Several traces share one time scale, so
// they compare at a glance. Host-only.
#include <span>
#include <string>

#include "sluice/trace/trace.hpp"

namespace sluice {

struct SvgOptions {
  int width = 1100;  // pixels
};

std::string timeline_svg(std::span<const Trace> traces, const SvgOptions& options = {});

}  // namespace sluice
