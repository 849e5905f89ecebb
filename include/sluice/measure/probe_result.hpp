#pragma once
// What `sluice probe` measured, as plain data. Host-only.
#include <cstddef>
#include <string>
#include <vector>

#include "sluice/core/byte_size.hpp"
#include "sluice/core/device_info.hpp"
#include "sluice/measure/stats.hpp"

namespace sluice {

// One measured operation: a copy of `bytes` (or a fixed cost when bytes is 0),
// repeated after warm-up; times in milliseconds.
struct Measurement {
  std::string name;      // e.g. "h2d pinned", "host memcpy", "kernel launch"
  std::size_t bytes = 0;
  unsigned threads = 1;  // for host copies
  std::size_t chunks = 0;  // for copy-through rows: the chunks the bytes were cut into
  Summary ms;
  // Bytes that crossed per run, when it differs from `bytes` (both directions at once moves 2x).
  std::size_t moved_bytes() const { return moved == 0 ? bytes : moved; }
  std::size_t moved = 0;
  double median_gbps() const { return gb_per_s(static_cast<double>(moved_bytes()), ms.median); }
};

struct ProbeResult {
  DeviceInfo device;
  std::vector<Measurement> transfers;     // one per (direction/source, size)
  std::vector<Measurement> registration;  // "register" / "unregister" per size
  // Every byte in and out again, chunked and pipelined, no kernel: one per
  // (size, chunk count); `moved` counts both directions.
  std::vector<Measurement> copy_through;
  std::vector<Measurement> host_copies;   // one per thread count
  std::vector<Measurement> fixed_costs;   // bytes == 0, per-operation time
  std::vector<std::string> notes;         // e.g. sizes skipped for lack of memory
};

}  // namespace sluice
