#pragma once
// What one pipeline run did, stage by stage: the raw intervals a timeline is
// drawn from, the bytes each engine moved, and the bound it is judged by.
// Host-only.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "sluice/bound/bound.hpp"
#include "sluice/trace/stage_interval.hpp"
#include "sluice/trace/trace.hpp"

namespace sluice {

struct RunReport {
  std::size_t item_count = 0;
  std::size_t chunk_items = 0;  // the largest chunk
  std::size_t chunk_count = 0;
  std::size_t depth = 0;
  unsigned compute_streams = 1;
  // Bytes through each engine. kernel_ms is the union of the run's compute
  // intervals when they were timed (record, report_bound, or the run that
  // learnt its chunks: PipelineOptions::adapt_chunks), else 0.
  RunVolume volume;
  double wall_ms = 0;                    // first enqueue to last output in host memory
  std::vector<StageInterval> intervals;  // empty unless recording was on
  // With PipelineOptions::report_bound, unless the engines' rates could not
  // be measured (the run's outputs are in place by then): a note says why.
  std::optional<Bound> bound;
  std::vector<std::string> notes;        // what the run decided on its own (e.g. a span left staged, and why)
  // What this run had to allocate before its first chunk (0 when the slots
  // kept from earlier runs were large enough): why a first run is slower.
  std::size_t device_bytes_allocated = 0;
  std::size_t pinned_bytes_allocated = 0;
  // The run's fixed costs, filled when its stages were timed (as kernel_ms
  // is), else 0: from run() (or submit()) being called to the
  // first copy starting on the device, from the last copy ending to run()
  // (or wait()) returning, and the host's time to enqueue one chunk.
  struct Overhead {
    double start_ms = 0;
    double end_ms = 0;
    double host_us_per_chunk = 0;
    double prepare_ms = 0;  // of start_ms: the host's checks, plan and slots before the run's origin
  };
  Overhead overhead;

  // Summed duration of one lane's intervals (0 without recording).
  double busy_ms(Lane lane) const;
  // bound / wall; 0 when no bound was measured.
  double efficiency() const { return bound ? sluice::efficiency(bound->ms, wall_ms) : 0.0; }
};

// A recorded run as a timeline (record must have been on).
Trace make_trace(std::string title, const RunReport& report);

}  // namespace sluice
