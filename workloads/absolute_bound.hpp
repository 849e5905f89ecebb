#pragma once
// The absolute bound of a workload over a problem (docs/design.md): every
// engine at its best, measured in the same process, none of it depending on
// a pipeline's chunk size, depth or streams:
//  - the link: link_rates() (large transfers, best of one or two streams per
//    direction), measured once per device;
//  - the kernel: the workload alone over the same data, the faster of one
//    launch over all of it and 16 MiB pieces back to back on one stream;
//  - the host (pageable rows): the staging threads' copy rates, measured once
//    while the copy engines stream (staging_rates.hpp).
#include "sluice/bound.hpp"
#include "sluice/staging_pool.hpp"
#include "workload.hpp"

namespace sluice::workloads {

struct AbsoluteBound {
  EngineRates rates;
  double kernel_ms = 0;
  Bound pinned;  // link and kernel
  Bound staged;  // and host staging of every input and the output
};

// The workload alone on the device over problem.items() items, fastest of `repeats`.
double kernel_alone_ms(const Problem& problem, int repeats);

// What one run of the workload moves through each engine.
RunVolume volume_of(const Problem& problem, double kernel_ms, bool staged);

// `host` measures the staging rates; without it the staged bound is left empty.
AbsoluteBound absolute_bound(const Problem& problem, int device, int repeats, StagingPool* host);

}  // namespace sluice::workloads
