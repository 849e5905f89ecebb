#pragma once
// What `sluice bench` measured, and how it is printed. Host-only: the report
// and the targets are tested without a GPU.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "bound/host_rates.hpp"
#include "bound/link_rates.hpp"
#include "measured_row.hpp"
#include "sluice/bound/bound.hpp"
#include "sluice/core/device_info.hpp"
#include "sluice/measure/model.hpp"
#include "sluice/trace/trace.hpp"

namespace sluice::bench {

using workloads::MeasuredRow;
using workloads::RowKind;

// A case's bound as the report needs it (workloads::AbsoluteBound's
// figures): the rates, what the rows move through each engine, and the
// bounds these give.
struct CaseBound {
  EngineRates rates;
  double kernel_ms = 0;
  RunVolume pinned_volume, staged_volume;
  Bound pinned;  // link and kernel (file cases: and storage)
  Bound staged;  // and host staging; empty without host rates
  // The bounds again with other rates (the best a whole run saw), same volumes.
  void recompute(const EngineRates& best);
};

// One workload at one size: its rows share the bound.
struct BenchCase {
  std::string workload;
  std::size_t bytes = 0;  // per array (file cases: the file)
  CaseBound bound;
  bool file = false;
  // What the host can do for a staged run of this case (pageable cases of
  // 256 MiB and more): the staging threads alone copying every input byte
  // into a pinned ring and the ring into the output, both at once, the
  // output poisoned first, measured in the same rounds as the staged row.
  // No GPU work, so where even this misses the host-aware bound, the bound
  // is out of the host's reach and the staged row is judged against this.
  std::optional<MeasuredRow> host_alone;
};

struct BenchResult {
  DeviceInfo device;
  int repeats = 0;  // timed rounds at 256 MiB and above (noise.hpp: more below)
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

// The rows of one case, in the order they were added.
std::vector<const MeasuredRow*> rows_of(const BenchResult& result, const BenchCase& c);

std::string bench_text(const BenchResult& result);
std::string bench_json(const BenchResult& result, int indent = 2);

}  // namespace sluice::bench
