#include "sluice/measure/stats.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace sluice {

namespace {
double sorted_percentile(const std::vector<double>& sorted, double q) {
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const auto lower = static_cast<std::size_t>(std::floor(rank));
  const std::size_t upper = std::min(lower + 1, sorted.size() - 1);
  const double fraction = rank - static_cast<double>(lower);
  return sorted[lower] + (sorted[upper] - sorted[lower]) * fraction;
}
}  // namespace

double percentile(std::span<const double> samples, double q) {
  if (samples.empty()) throw std::invalid_argument("percentile of an empty sample");
  if (!(q >= 0.0 && q <= 1.0)) throw std::invalid_argument("percentile rank must be in [0, 1]");
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted_percentile(sorted, q);
}

Summary summarize(std::span<const double> samples) {
  if (samples.empty()) throw std::invalid_argument("summary of an empty sample");
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  return Summary{sorted.size(),
                 sorted_percentile(sorted, 0.5),
                 sorted.front(),
                 sorted.back(),
                 sorted_percentile(sorted, 0.1),
                 sorted_percentile(sorted, 0.9),
                 sorted_percentile(sorted, 0.99)};
}

}  // namespace sluice
