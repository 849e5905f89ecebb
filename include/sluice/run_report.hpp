#pragma once
// What one pipeline run did, stage by stage: the raw intervals a timeline is
// drawn from, and the totals the bound is compared with. Host-only.
#include <cstddef>
#include <optional>
#include <vector>

#include "sluice/bound.hpp"
#include "sluice/stage_interval.hpp"

namespace sluice {

struct RunReport {
  std::size_t item_count = 0;
  std::size_t chunk_items = 0;
  std::size_t chunk_count = 0;
  std::size_t depth = 0;
  double h2d_bytes = 0;
  double d2h_bytes = 0;
  double wall_ms = 0;                  // first enqueue to last output in host memory
  std::vector<StageInterval> intervals;  // empty unless recording was on
  std::optional<StageCosts> costs;     // the stages measured alone, when asked for
  std::optional<Bound> bound;

  // Summed duration of one lane's intervals (0 without recording).
  double busy_ms(Lane lane) const;
  // bound / wall; 0 when no bound was measured.
  double efficiency() const { return bound ? sluice::efficiency(bound->ms, wall_ms) : 0.0; }
};

}  // namespace sluice
