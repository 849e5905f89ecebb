#pragma once
// What `sluice bench` measured, and how it is printed. Host-only.
#include <cstddef>
#include <string>
#include <vector>

#include "sluice/bound.hpp"
#include "sluice/device_info.hpp"
#include "sluice/stats.hpp"
#include "sluice/trace.hpp"

namespace sluice::bench {

struct BenchRow {
  std::string workload;
  std::size_t bytes = 0;  // per array
  std::string method;
  bool sluice = false;    // a sluice pipeline row, as opposed to a peer
  bool pageable = false;  // host data in pageable memory
  Summary ms;
  double gbps = 0;        // bytes in + out over the median time
  double speedup = 0;     // synchronous (pinned) median over this median
  double efficiency = 0;  // bound over this median
  bool verified = false;
  std::string detail;     // why verification failed
};

struct BenchBound {
  std::string workload;
  std::size_t bytes = 0;
  StageCosts costs;
  Bound bound;
};

struct BenchResult {
  DeviceInfo device;
  int repeats = 0;
  std::vector<BenchRow> rows;
  std::vector<BenchBound> bounds;
  std::vector<Trace> traces;  // one recorded pipeline run per case and memory kind
};

// The targets sluice holds itself to, checked on one result.
struct TargetCheck {
  std::string what;
  bool met = false;
};
std::vector<TargetCheck> check_targets(const BenchResult& result);

std::string bench_text(const BenchResult& result);
std::string bench_json(const BenchResult& result, int indent = 2);

}  // namespace sluice::bench
