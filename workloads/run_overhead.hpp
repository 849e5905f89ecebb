#pragma once
// A run's fixed costs, worked out the same way for every row that can be
// timed so: from the call to the first copy starting on the device, from
// the last copy ending to the call returning, and the host's time to
// enqueue one chunk (RunReport::Overhead). A pipeline's runs report their
// own; a hand-written peer's come from a recorded run: the host clock at
// the call, when it had enqueued its last operation and when it returned,
// and events around every copy. Host-only.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "sluice/measure/stats.hpp"
#include "sluice/pipeline/run_report.hpp"
#include "sluice/trace/stage_interval.hpp"

namespace sluice::workloads {

// Host times of one recorded run, in ms after its trace's origin event was
// recorded (the device reaches that event within a few microseconds of its
// recording, the error of these figures).
struct HostMarks {
  double call_ms = 0;      // the run was called
  double enqueued_ms = 0;  // its last operation had been enqueued
  double return_ms = 0;    // it returned, the output in host memory
};

// Unset where the run recorded no copies.
inline std::optional<RunReport::Overhead> overhead_of(std::span<const StageInterval> intervals, const HostMarks& host) {
  std::optional<double> first, last;
  std::set<std::size_t> chunks;
  for (const auto& i : intervals) {
    if (i.lane != Lane::h2d && i.lane != Lane::d2h) continue;
    first = first ? std::min(*first, i.start_ms) : i.start_ms;
    last = last ? std::max(*last, i.end_ms) : i.end_ms;
    chunks.insert(i.chunk);
  }
  if (!first) return std::nullopt;
  RunReport::Overhead o;
  o.start_ms = *first - host.call_ms;
  o.end_ms = host.return_ms - *last;
  o.host_us_per_chunk = 1000.0 * (host.enqueued_ms - host.call_ms) / static_cast<double>(chunks.size());
  return o;
}

// Figure by figure, the median of several runs' costs; unset for none.
inline std::optional<RunReport::Overhead> median_overhead(std::span<const RunReport::Overhead> runs) {
  if (runs.empty()) return std::nullopt;
  std::vector<double> start, end, host, prepare;
  for (const auto& r : runs) {
    start.push_back(r.start_ms);
    end.push_back(r.end_ms);
    host.push_back(r.host_us_per_chunk);
    prepare.push_back(r.prepare_ms);
  }
  return RunReport::Overhead{percentile(start, 0.5), percentile(end, 0.5), percentile(host, 0.5),
                             percentile(prepare, 0.5)};
}

// A report's costs are left 0 where the engine did not time the run's stages.
inline bool filled(const RunReport::Overhead& o) {
  return o.start_ms != 0 || o.end_ms != 0 || o.host_us_per_chunk != 0;
}

}  // namespace sluice::workloads
