#pragma once
// One stage of one chunk on one engine: the unit a timeline is drawn from.
// Host-only.
#include <cstddef>
#include <string_view>

namespace sluice {

// One lane per engine, as a profiler draws them.
// `peer` is GPU-to-GPU traffic: peer copies and collectives.
enum class Lane { stage_in, h2d, compute, d2h, stage_out, peer };

constexpr std::string_view to_string(Lane lane) {
  switch (lane) {
    case Lane::stage_in: return "host stage-in";
    case Lane::h2d: return "H2D copy";
    case Lane::compute: return "compute";
    case Lane::d2h: return "D2H copy";
    case Lane::stage_out: return "host stage-out";
    case Lane::peer: return "GPU-GPU";
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
  int device = -1; // which GPU, where a timeline shows several; -1: not named
  double duration_ms() const { return end_ms - start_ms; }
};

}  // namespace sluice
