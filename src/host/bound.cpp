#include "sluice/bound.hpp"

#include <algorithm>
#include <stdexcept>

namespace sluice {

namespace {
double at_rate(double bytes, double gbps) { return gbps > 0 ? bytes / (gbps * 1e6) : 0.0; }
}  // namespace

Bound compute_bound(const RunVolume& v, const EngineRates& r) {
  for (double x : {v.h2d_bytes, v.d2h_bytes, v.staged_in_bytes, v.staged_out_bytes, v.read_bytes, v.written_bytes,
                   v.kernel_ms, r.h2d_gbps, r.d2h_gbps, r.both_gbps, r.stage_in_gbps, r.stage_out_gbps,
                   r.stage_both_gbps, r.read_gbps, r.write_gbps})
    if (x < 0) throw std::invalid_argument("bound: volumes and rates must not be negative");
  Bound bound;
  auto add = [&](std::string name, double ms) {
    if (ms > 0) bound.terms.push_back({std::move(name), ms});
  };
  add("h2d", at_rate(v.h2d_bytes, r.h2d_gbps));
  add("kernel", v.kernel_ms);
  add("d2h", at_rate(v.d2h_bytes, r.d2h_gbps));
  if (v.h2d_bytes > 0 && v.d2h_bytes > 0) add("link (both directions)", at_rate(v.h2d_bytes + v.d2h_bytes, r.both_gbps));
  // Host staging: one pool of threads serves both directions, so when both
  // stage, their bytes share the measured both-directions rate.
  double staging_ms = std::max(at_rate(v.staged_in_bytes, r.stage_in_gbps), at_rate(v.staged_out_bytes, r.stage_out_gbps));
  if (v.staged_in_bytes > 0 && v.staged_out_bytes > 0)
    staging_ms = std::max(staging_ms, at_rate(v.staged_in_bytes + v.staged_out_bytes, r.stage_both_gbps));
  add("host staging", staging_ms);
  add("storage read", at_rate(v.read_bytes, r.read_gbps));
  add("storage write", at_rate(v.written_bytes, r.write_gbps));
  std::stable_sort(bound.terms.begin(), bound.terms.end(),
                   [](const BoundTerm& a, const BoundTerm& b) { return a.ms > b.ms; });
  if (!bound.terms.empty()) {
    bound.ms = bound.terms.front().ms;
    bound.limiter = bound.terms.front().name;
  }
  return bound;
}

}  // namespace sluice
