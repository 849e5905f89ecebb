#pragma once
// Summaries of repeated measurements: sluice reports medians and spread,
// never a single sample or a mean that one outlier can move. Host-only.
#include <cstddef>
#include <span>
#include <vector>

namespace sluice {

struct Summary {
  std::size_t count = 0;
  double median = 0;
  double min = 0;
  double max = 0;
  double p10 = 0;
  double p90 = 0;
  double p99 = 0;
};

// Linear interpolation between closest ranks; q in [0, 1]. Throws
// std::invalid_argument on an empty sample or q outside [0, 1].
double percentile(std::span<const double> samples, double q);

// Throws std::invalid_argument on an empty sample.
Summary summarize(std::span<const double> samples);

// Bytes over milliseconds, in GB/s (10^9 bytes per second).
constexpr double gb_per_s(double bytes, double ms) { return ms > 0 ? bytes / (ms * 1e6) : 0.0; }

}  // namespace sluice
