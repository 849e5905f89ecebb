#pragma once
// Rows and cases for the bench's host tests, as the bench makes them.
#include <string>
#include <vector>

#include "bench_result.hpp"
#include "sluice/measure/stats.hpp"

namespace sluice::bench::testing {

inline MeasuredRow row(const std::string& workload, std::size_t bytes, const std::string& method, RowKind kind,
                       std::vector<double> samples, double efficiency = 0.5, const std::string& memory = "pinned") {
  MeasuredRow r;
  r.workload = workload;
  r.bytes = bytes;
  r.method = method;
  r.kind = kind;
  r.memory = memory;
  r.ms = summarize(samples);
  r.samples = std::move(samples);
  r.efficiency = efficiency;
  r.bound_ms = efficiency * r.ms.median;
  r.bound_term = "link (both directions)";
  r.verified = true;
  return r;
}

// Five runs around `median`, 1% apart: a spread of 2%.
inline std::vector<double> runs(double median) {
  return {median * 0.98, median * 0.99, median, median * 1.01, median * 1.02};
}

inline BenchCase case_of(const std::string& workload, std::size_t bytes) {
  BenchCase c;
  c.workload = workload;
  c.bytes = bytes;
  return c;
}

}  // namespace sluice::bench::testing
