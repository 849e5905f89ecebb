#pragma once
// The host's staging engine at its best: how fast the staging threads copy
// pageable memory into page-locked slots (stage-in, memcpy), out of them
// (stage-out, streaming stores), and both at once. The source or destination
// is larger than the last-level cache, as a caller's array is; the slot side
// is a small ring, as the pipeline's is. Host-only.
#include <cstddef>

#include "sluice/staging_pool.hpp"

namespace sluice {

struct HostCopyRates {
  double stage_in_gbps = 0;
  double stage_out_gbps = 0;
  double both_gbps = 0;  // bytes of both directions counted
  unsigned threads = 0;
};

// Fastest of `repeats` for each figure. Allocates 2 x `bytes` (+ 2 x 64 MiB) while it runs.
HostCopyRates measure_host_copy_rates(StagingPool& pool, std::size_t bytes = std::size_t{512} << 20, int repeats = 3);

// Measured once per process and thread count, then reused.
HostCopyRates host_copy_rates(StagingPool& pool);

}  // namespace sluice
