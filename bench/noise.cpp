#include "noise.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "sluice/measure/stats.hpp"

namespace sluice::bench {

Spread spread_of(std::span<const double> samples) {
  if (samples.empty()) throw std::invalid_argument("spread of an empty sample");
  Spread s;
  s.median = percentile(samples, 0.5);
  s.q25 = percentile(samples, 0.25);
  s.q75 = percentile(samples, 0.75);
  if (samples.size() >= min_samples_to_resolve && s.median > 0) s.relative = (s.q75 - s.q25) / s.median;
  return s;
}

Lead lead_of(std::span<const double> a, std::span<const double> b) {
  const Spread x = spread_of(a), y = spread_of(b);
  Lead lead;
  lead.ratio = x.median > 0 ? y.median / x.median : 0;
  if (a.size() < min_samples_to_resolve || b.size() < min_samples_to_resolve) return lead;
  // The faster row's slow half and the slower row's fast half face each other.
  const bool a_ahead = x.median <= y.median;
  const Spread& fast = a_ahead ? x : y;
  const Spread& slow = a_ahead ? y : x;
  const double facing = (fast.q75 - fast.median) + (slow.median - slow.q25);
  lead.resolvable = fast.median > 0 ? facing / fast.median : 0;
  lead.resolved = fast.q75 < slow.q25;
  return lead;
}

std::string describe(const Lead& lead) {
  const std::string ratio = fmt::format("{:.3f}x", lead.ratio);
  if (!lead.resolvable) return ratio + ", too few runs to tell";
  if (lead.resolved) return ratio + ", resolved";
  return fmt::format("{}, level (resolvable {:.1f}%)", ratio, 100 * *lead.resolvable);
}

int rounds_for(std::size_t bytes, int repeats) {
  constexpr std::size_t full = std::size_t{256} << 20;
  const std::size_t factor = std::clamp<std::size_t>(bytes > 0 ? full / bytes : 8, 1, 8);
  return repeats * static_cast<int>(factor);
}

}  // namespace sluice::bench
