#pragma once
// The host staging engine while the copy engines stream both ways between
// its slot ring and the device, as they do in every staged run: the copy
// engines read the slots the threads have just written and write the ones
// the threads read next, so DMA and staging share host memory (and the
// cache) as in a run. Measured with a separate pinned buffer for the link
// instead, staging ran at 45-55 GB/s both ways on the H200's host where runs
// staged 78 GB/s, and staged rows read 1.05-1.28 of the bound; the link's
// traffic costs a run little once its slots stay in cache.
//
// A bound takes the fastest of this and the link-idle rates (host_rates.hpp)
// for host staging alone, and takes these, with what the link moved
// meanwhile (link_gbps), as the point where staging and the copy engines
// share host memory (EngineRates::staging_beside_link).
#include "core/staging_pool.hpp"
#include "host_rates.hpp"

namespace sluice {

// Measures now (about 0.2 s).
HostCopyRates measure_staging_rates(int device, StagingPool& pool);

// The same over the caller's memory (host_rates.hpp): how fast this memory
// stages, which the bench takes beside the figures above for a row's bound.
HostCopyRates measure_staging_rates(int device, StagingPool& pool, const HostRegions& regions);

// Measures again and keeps, figure by figure, the best seen (as refresh_link_rates).
HostCopyRates refresh_staging_rates(int device, StagingPool& pool);

// Measured once per device, thread count and process, then reused.
HostCopyRates staging_rates(int device, StagingPool& pool);

}  // namespace sluice
