#pragma once
// The host's staging engine at its best: how fast the staging threads copy
// pageable memory into page-locked slots (stage-in, memcpy), out of them
// (stage-out, streaming stores), and both at once. The source or destination
// is larger than the last-level cache, as a caller's array is; the slot side
// is a small ring, as the pipeline's is. Host-only.
#include <cstddef>

#include "core/staging_pool.hpp"
#include "sluice/bound/bound.hpp"

namespace sluice {

struct HostCopyRates {
  double stage_in_gbps = 0;
  double stage_out_gbps = 0;
  double both_gbps = 0;  // bytes of both directions counted
  unsigned threads = 0;
  // The copy engines' both-ways rate while these were measured (staging_rates.hpp); 0: the link was idle.
  double link_gbps = 0;
};

// The caller's side of the copies: where stage-in reads and stage-out writes.
struct HostRegions {
  const std::byte* in = nullptr;
  std::size_t in_bytes = 0;
  std::byte* out = nullptr;  // overwritten
  std::size_t out_bytes = 0;
};

// The slots' side of the copies: where stage-in writes and stage-out reads.
// A pipeline's slots are a few chunks of a few MiB, used again every few
// chunks, so they can stay in the last-level cache; the measurement's ring
// is of that scale (its own of slot_ring_bytes when none is given), so no
// run's slots are kinder to the cache than the measurement's.
struct SlotRing {
  std::byte* in = nullptr;
  std::byte* out = nullptr;
  std::size_t bytes = 0;  // of each
};
inline constexpr std::size_t slot_ring_bytes = std::size_t{16} << 20;
// The smaller of the two piece sizes the copies are measured in (the faster
// counts): near a pipeline's piece of a 4 MiB chunk over 14 threads, and a
// whole fraction of any ring of whole MiB.
inline constexpr std::size_t staged_piece_bytes = std::size_t{256} << 10;
// The caller's side when none is given: larger than the last-level cache.
inline constexpr std::size_t host_copy_bytes = std::size_t{512} << 20;

// Fastest of `repeats` for each figure. Allocates 2 x `bytes` (+ the ring) while it runs.
// Throws std::invalid_argument for a ring that is not a whole number of staging pieces.
HostCopyRates measure_host_copy_rates(StagingPool& pool, std::size_t bytes = host_copy_bytes, int repeats = 3,
                                      SlotRing ring = {});

// The same over memory the caller has: a row's own pageable arrays or a
// mapped file, so the rate is the one staging that memory can reach (page
// cache and anonymous memory, huge pages or not, do not copy alike). A
// figure whose region is empty is left 0. Allocates the ring, when none is given, while it runs.
HostCopyRates measure_host_copy_rates(StagingPool& pool, const HostRegions& regions, int repeats = 3, SlotRing ring = {});

// The faster of two measurements, figure by figure.
HostCopyRates fastest_of(const HostCopyRates& a, const HostCopyRates& b);

// Measured once per process and thread count, then reused.
HostCopyRates host_copy_rates(StagingPool& pool);

// The host staging part of EngineRates (as with_link is the link part).
inline EngineRates with_host(EngineRates rates, const HostCopyRates& host) {
  rates.stage_in_gbps = host.stage_in_gbps;
  rates.stage_out_gbps = host.stage_out_gbps;
  rates.stage_both_gbps = host.both_gbps;
  return rates;
}

// The point where staging and the link share host memory
// (EngineRates::staging_beside_link), from rates measured while the link streams.
inline EngineRates with_staging_beside_link(EngineRates rates, const HostCopyRates& while_link_streams) {
  rates.staging_beside_link = {while_link_streams.both_gbps, while_link_streams.link_gbps};
  return rates;
}

}  // namespace sluice
