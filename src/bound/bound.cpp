#include "sluice/bound/bound.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

namespace sluice {

namespace {

double at_rate(double bytes, double gbps) { return gbps > 0 ? bytes / (gbps * 1e6) : 0.0; }

struct Vec {
  double x, y;
};
double cross(Vec a, Vec b) { return a.x * b.y - a.y * b.x; }

// The largest s for which s * u lies on a segment between two of `points`
// (or on one of them): where the ray along u leaves their convex hull.
template <std::size_t N>
double farthest_along(Vec u, const std::array<Vec, N>& points) {
  constexpr double slack = 1e-12;
  double best = 0;
  for (std::size_t i = 0; i < N; ++i) {
    const Vec p = points[i];
    if (std::abs(cross(p, u)) <= slack * (p.x * p.x + p.y * p.y + 1) && p.x * u.x + p.y * u.y > 0)
      best = std::max(best, (p.x * u.x + p.y * u.y) / (u.x * u.x + u.y * u.y));
    for (std::size_t j = i + 1; j < N; ++j) {
      const Vec w{points[j].x - p.x, points[j].y - p.y};
      const double det = cross(u, w);
      if (det == 0) continue;  // parallel to the ray: its ends are checked as points
      const double s = cross(p, w) / det, along = cross(p, u) / det;
      if (s > 0 && along >= -slack && along <= 1 + slack) best = std::max(best, s);
    }
  }
  return best;
}

bool mixes_known(const EngineRates& r) {
  return r.h2d_gbps > 0 && r.d2h_gbps > 0 && r.both_gbps > 0 && r.h2d_heavy.known() && r.d2h_heavy.known();
}

// Both directions busy: the convex hull of the measured points (rates in bytes/ms).
double measured_link_ms(double h2d_bytes, double d2h_bytes, const EngineRates& r) {
  const double per_ms = 1e6;
  const std::array<Vec, 5> points{{{r.h2d_gbps * per_ms, 0},
                                   {r.h2d_heavy.h2d_gbps * per_ms, r.h2d_heavy.d2h_gbps * per_ms},
                                   {r.both_gbps / 2 * per_ms, r.both_gbps / 2 * per_ms},
                                   {r.d2h_heavy.h2d_gbps * per_ms, r.d2h_heavy.d2h_gbps * per_ms},
                                   {0, r.d2h_gbps * per_ms}}};
  const double s = farthest_along(Vec{h2d_bytes, d2h_bytes}, points);
  return s > 0 ? 1 / s : 0.0;
}

}  // namespace

double link_ms(double h2d_bytes, double d2h_bytes, const EngineRates& r) {
  if (h2d_bytes <= 0 && d2h_bytes <= 0) return 0;
  if (mixes_known(r)) return measured_link_ms(h2d_bytes, d2h_bytes, r);
  double ms = std::max(at_rate(h2d_bytes, r.h2d_gbps), at_rate(d2h_bytes, r.d2h_gbps));
  if (h2d_bytes > 0 && d2h_bytes > 0) ms = std::max(ms, at_rate(h2d_bytes + d2h_bytes, r.both_gbps));
  return ms;
}

double staging_ms(const RunVolume& v, const EngineRates& r) {
  double ms = std::max(at_rate(v.staged_in_bytes, r.stage_in_gbps), at_rate(v.staged_out_bytes, r.stage_out_gbps));
  if (v.staged_in_bytes > 0 && v.staged_out_bytes > 0)
    ms = std::max(ms, at_rate(v.staged_in_bytes + v.staged_out_bytes, r.stage_both_gbps));
  return ms;
}

double host_memory_ms(const RunVolume& v, const EngineRates& r) {
  const double staged = v.staged_in_bytes + v.staged_out_bytes, copied = v.h2d_bytes + v.d2h_bytes;
  const double alone_ms = staging_ms(v, r), link_alone_ms = link_ms(v.h2d_bytes, v.d2h_bytes, r);
  if (staged <= 0 || copied <= 0 || alone_ms <= 0 || link_alone_ms <= 0 || !r.staging_beside_link.known()) return 0;
  // (staged bytes per ms, copied bytes per ms). The shared point's link side
  // is the link at its best both ways when that is faster than what it kept
  // beside the staging threads: the measurement's slots are not a run's (a
  // run's copy engines read slots just written, often from cache), so only
  // the staging side is taken as measured, and the point stays outside what
  // a run can reach.
  const double per_ms = 1e6;
  const double shared_link_gbps = std::max(r.staging_beside_link.link_gbps, r.both_gbps);
  const std::array<Vec, 3> points{{{staged / alone_ms, 0},
                                   {r.staging_beside_link.stage_gbps * per_ms, shared_link_gbps * per_ms},
                                   {0, copied / link_alone_ms}}};
  const double s = farthest_along(Vec{staged, copied}, points);
  return s > 0 ? 1 / s : 0.0;
}

Bound compute_bound(const RunVolume& v, const EngineRates& r) {
  for (double x : {v.h2d_bytes, v.d2h_bytes, v.staged_in_bytes, v.staged_out_bytes, v.read_bytes, v.written_bytes,
                   v.kernel_ms, r.h2d_gbps, r.d2h_gbps, r.both_gbps, r.h2d_heavy.h2d_gbps, r.h2d_heavy.d2h_gbps,
                   r.d2h_heavy.h2d_gbps, r.d2h_heavy.d2h_gbps, r.stage_in_gbps, r.stage_out_gbps, r.stage_both_gbps,
                   r.staging_beside_link.stage_gbps, r.staging_beside_link.link_gbps, r.read_gbps, r.write_gbps})
    if (x < 0) throw std::invalid_argument("bound: volumes and rates must not be negative");
  Bound bound;
  auto add = [&](std::string_view name, double ms) {
    if (ms > 0) bound.terms.push_back({std::string(name), ms});
  };
  add(term::h2d, at_rate(v.h2d_bytes, r.h2d_gbps));
  add(term::kernel, v.kernel_ms);
  add(term::d2h, at_rate(v.d2h_bytes, r.d2h_gbps));
  // Both directions at once, at this run's mix when the mixes were measured.
  if (v.h2d_bytes > 0 && v.d2h_bytes > 0)
    add(term::link_both, mixes_known(r) ? measured_link_ms(v.h2d_bytes, v.d2h_bytes, r)
                                        : at_rate(v.h2d_bytes + v.d2h_bytes, r.both_gbps));
  add(term::host_staging, staging_ms(v, r));
  add(term::host_memory, host_memory_ms(v, r));
  add(term::storage_read, at_rate(v.read_bytes, r.read_gbps));
  add(term::storage_write, at_rate(v.written_bytes, r.write_gbps));
  std::stable_sort(bound.terms.begin(), bound.terms.end(),
                   [](const BoundTerm& a, const BoundTerm& b) { return a.ms > b.ms; });
  if (!bound.terms.empty()) {
    bound.ms = bound.terms.front().ms;
    bound.limiter = bound.terms.front().name;
  }
  return bound;
}

}  // namespace sluice
