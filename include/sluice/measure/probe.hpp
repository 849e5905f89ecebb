#pragma once
// `sluice probe`: can this GPU overlap, and how fast can data move?
#include <cstddef>

#include "sluice/measure/probe_result.hpp"

namespace sluice {

struct ProbeOptions {
  int device = 0;
  std::size_t min_bytes = std::size_t{64} << 10;  // 64 KiB
  std::size_t max_bytes = std::size_t{1} << 30;   // 1 GiB
  int repeats = 0;                                // 0: by size, more for small copies
  unsigned max_host_threads = 0;                  // 0: all hardware threads
  bool bandwidth = true;
  bool host_copies = true;
  bool fixed_costs = true;
};

// Throws std::invalid_argument for sizes that are zero or out of order.
ProbeResult run_probe(const ProbeOptions& options);

}  // namespace sluice
