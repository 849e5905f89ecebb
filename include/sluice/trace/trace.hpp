#pragma once
// A timeline: the stage intervals of one run, what overlapped, and how far
// from the bound it ended. Host-only; the writers beside it draw it.
#include <optional>
#include <string>
#include <vector>

#include "sluice/trace/stage_interval.hpp"

namespace sluice {

struct Trace {
  std::string title;  // e.g. "sluice pipeline, pinned" or "staircase, 4 streams"
  std::vector<StageInterval> intervals;
  double wall_ms = 0;               // the run's measured time; 0 if unknown
  std::optional<double> bound_ms;   // drawn as a marker when known

  // From 0 to the later of the wall time and the last interval's end.
  double span_ms() const;
};

struct LaneStats {
  Lane lane = Lane::compute;
  double busy_ms = 0;        // union of the lane's intervals (streams of a lane may overlap)
  double busy_fraction = 0;  // busy over the trace's span
  std::size_t gaps = 0;      // idle stretches between busy ones, longer than the threshold
  double longest_gap_ms = 0;
};

struct TraceStats {
  double span_ms = 0;
  std::vector<LaneStats> lanes;   // lanes that appear, in Lane order
  double overlap_fraction = 0;    // share of the span with two or more lanes busy
  std::optional<Lane> critical;   // the busiest lane: the one that sets the pace
};

// Gaps shorter than min_gap_ms (launch jitter) are not counted.
TraceStats analyze(const Trace& trace, double min_gap_ms = 0.01);

}  // namespace sluice
