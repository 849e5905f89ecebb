#pragma once
// The bound every sluice figure is judged against (DESIGN.md):
//   bound = max(T_h2d, T_kernel, T_d2h, (bytes_h2d + bytes_d2h) / bw_bidirectional)
// A pipeline cannot beat its slowest engine, nor move data faster than the
// link carries both directions at once. Host-only.
#include <string>
#include <string_view>

namespace sluice {

struct StageCosts {
  double h2d_ms = 0;     // all input bytes, copy alone, from page-locked memory
  double kernel_ms = 0;  // all chunks' compute alone
  double d2h_ms = 0;     // all output bytes, copy alone, to page-locked memory
  double h2d_bytes = 0;
  double d2h_bytes = 0;
  // Measured rate with H2D and D2H running at once, GB/s; 0 when unknown.
  double bidirectional_gbps = 0;
};

struct Bound {
  double ms = 0;
  std::string limiter;  // "h2d", "kernel", "d2h" or "link (both directions)"
};

Bound compute_bound(const StageCosts& costs);

// bound / measured, in (0, ~1]; 0 when measured is not positive.
constexpr double efficiency(double bound_ms, double measured_ms) {
  return measured_ms > 0 ? bound_ms / measured_ms : 0.0;
}

}  // namespace sluice
