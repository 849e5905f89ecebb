#pragma once
// The absolute bound of a workload over a problem (docs/design.md): every
// engine at its best, measured in the same process, none of it depending on
// a pipeline's chunk size, depth or streams:
//  - the link: refresh_link_rates() (large transfers, best of one or two
//    streams per direction), measured again for each bound, the best kept;
//  - the kernel: the workload alone over the same data, the faster of one
//    launch over all of it and 16 MiB pieces back to back on one stream;
//  - the host (pageable rows): the staging threads' copy rates with the link
//    idle and while the copy engines stream (staging_rates.hpp), over scratch
//    memory and over the row's own arrays; the fastest of them.
#include "bound/host_rates.hpp"
#include "core/staging_pool.hpp"
#include "sluice/bound/bound.hpp"
#include "workload.hpp"

namespace sluice::workloads {

struct AbsoluteBound {
  EngineRates rates;
  double kernel_ms = 0;
  RunVolume pinned_volume, staged_volume;  // what the rows move through each engine
  Bound pinned;  // link and kernel
  Bound staged;  // and host staging of every input and the output (empty without host rates)

  // The bounds again with other rates (the best a whole run saw), same volumes.
  void recompute(const EngineRates& best);
};

// The workload alone on the device over problem.items() items, fastest of `repeats`.
double kernel_alone_ms(const Problem& problem, int repeats);

// What one run of the workload moves through each engine.
RunVolume volume_of(const Problem& problem, double kernel_ms, bool staged);

// `host` measures the staging rates; without it the staged bound is left empty.
// With `pageable` (the same workload over pageable arrays), staging is also
// measured over those arrays, and the faster figures enter the bound.
AbsoluteBound absolute_bound(const Problem& problem, int device, int repeats, StagingPool* host,
                             Problem* pageable = nullptr);

}  // namespace sluice::workloads
