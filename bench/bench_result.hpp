#pragma once
// What `sluice bench` measured, and how it is printed.
#include <cstddef>
#include <string>
#include <vector>

#include "absolute_bound.hpp"
#include "measure.hpp"
#include "sluice/device_info.hpp"
#include "sluice/host_rates.hpp"
#include "sluice/link_rates.hpp"
#include "sluice/model.hpp"
#include "sluice/trace.hpp"

namespace sluice::bench {

using workloads::MeasuredRow;

// One workload at one size: its rows share the bound.
struct BenchCase {
  std::string workload;
  std::size_t bytes = 0;  // per array (file cases: the file)
  workloads::AbsoluteBound bound;
  bool file = false;
};

struct BenchResult {
  DeviceInfo device;
  int repeats = 0;
  LinkRates link;
  HostCopyRates host;            // staging rates while the copy engines stream
  HostCopyRates host_idle_link;  // the same with the link idle
  HostCopyRates host_best;       // the fastest staging seen in the run, any way: the bound's host term
  SharedHostPoint staging_beside_link;  // the fastest seen: the bound's host memory term
  FixedCosts fixed;
  std::vector<BenchCase> cases;
  std::vector<MeasuredRow> rows;
  std::vector<Trace> traces;  // recorded pipeline runs
  std::vector<std::string> notes;
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
