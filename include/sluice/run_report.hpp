#pragma once
// What one pipeline run did, stage by stage: the raw intervals a timeline is
// drawn from, and the totals the bound is compared with. Host-only.
#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "sluice/bound.hpp"

namespace sluice {

// One lane per engine, as a profiler draws them.
enum class Lane { stage_in, h2d, compute, d2h, stage_out };

constexpr std::string_view to_string(Lane lane) {
  switch (lane) {
    case Lane::stage_in: return "host stage-in";
    case Lane::h2d: return "H2D copy";
    case Lane::compute: return "compute";
    case Lane::d2h: return "D2H copy";
    case Lane::stage_out: return "host stage-out";
  }
  return "unknown";
}

struct StageInterval {
  Lane lane = Lane::compute;
  std::size_t chunk = 0;
  double start_ms = 0;  // from the start of the run
  double end_ms = 0;
  std::size_t bytes = 0;
  int stream = 0;  // which stream of that lane (several compute streams)
  double duration_ms() const { return end_ms - start_ms; }
};

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
