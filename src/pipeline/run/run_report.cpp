#include "sluice/pipeline/run_report.hpp"

#include <utility>

namespace sluice {

double RunReport::busy_ms(Lane lane) const {
  double total = 0;
  for (const auto& interval : intervals)
    if (interval.lane == lane) total += interval.duration_ms();
  return total;
}

Trace make_trace(std::string title, const RunReport& report) {
  Trace t;
  t.title = std::move(title);
  t.intervals = report.intervals;
  t.wall_ms = report.wall_ms;
  if (report.bound) t.bound_ms = report.bound->ms;
  return t;
}

}  // namespace sluice
