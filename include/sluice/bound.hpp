#pragma once
// The bound every sluice figure is judged against (docs/design.md):
//
//   bound = max(T_h2d, T_kernel, T_d2h, (bytes_h2d + bytes_d2h) / rate_both_ways,
//               bytes_staged / rate_host_copy, bytes_read / rate_storage_read,
//               bytes_written / rate_storage_write)
//
// Each term is one engine at its best, measured independently of the
// pipeline's own configuration (chunk size, depth, streams): link rates from
// large transfers, the kernel over the same data back to back, the host copy
// rate with as many threads as help, storage on the same file system. Fill
// and drain are not in the bound: they are the pipeline's cost to shrink.
// efficiency = bound / measured; above 1 means a term was measured wrong.
// Host-only.
#include <string>
#include <vector>

namespace sluice {

// Engine rates in GB/s (10^9 bytes/s); 0 means unknown, and that term is left out.
struct EngineRates {
  double h2d_gbps = 0;        // pinned host -> device, alone
  double d2h_gbps = 0;        // device -> pinned host, alone
  double both_gbps = 0;       // both directions at once, bytes of both counted
  double stage_in_gbps = 0;   // host copy pageable -> pinned, all staging threads
  double stage_out_gbps = 0;  // host copy pinned -> pageable, all staging threads
  double stage_both_gbps = 0; // both staging directions at once, bytes of both counted
  double read_gbps = 0;       // storage read (the source's file system, page cache included)
  double write_gbps = 0;      // storage write
};

// What a run moves through each engine.
struct RunVolume {
  double h2d_bytes = 0;
  double d2h_bytes = 0;
  double staged_in_bytes = 0;   // pageable memory copied into pinned slots by the host
  double staged_out_bytes = 0;  // pinned slots copied out to pageable memory by the host
  double read_bytes = 0;        // read from storage straight into pinned slots
  double written_bytes = 0;     // written to storage straight from pinned slots
  double kernel_ms = 0;         // the compute alone over all the data; 0 when unknown
};

struct BoundTerm {
  std::string name;  // "h2d", "kernel", "d2h", "link (both directions)", "host staging", "storage read", ...
  double ms = 0;
};

struct Bound {
  double ms = 0;
  std::string limiter;           // the name of the largest term
  std::vector<BoundTerm> terms;  // every term that could be computed, largest first
  bool host_limited() const { return limiter == "host staging" || limiter == "storage read" || limiter == "storage write"; }
};

// Throws std::invalid_argument on negative volumes or rates.
Bound compute_bound(const RunVolume& volume, const EngineRates& rates);

// bound / measured, in (0, ~1]; 0 when measured is not positive.
constexpr double efficiency(double bound_ms, double measured_ms) {
  return measured_ms > 0 ? bound_ms / measured_ms : 0.0;
}

}  // namespace sluice
