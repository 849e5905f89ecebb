#include "sluice/run_report.hpp"

namespace sluice {

double RunReport::busy_ms(Lane lane) const {
  double total = 0;
  for (const auto& interval : intervals)
    if (interval.lane == lane) total += interval.duration_ms();
  return total;
}

}  // namespace sluice
