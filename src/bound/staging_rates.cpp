#include "staging_rates.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "sluice/core/device_buffer.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"

namespace sluice {

namespace {

using Clock = std::chrono::steady_clock;

// One round of the link's copies: when it ran and what it moved.
struct LinkRound {
  Clock::time_point begin, end;
  double bytes = 0;
};

// The link's both-ways rate over the rounds that ran wholly between `from` and `to`; 0 when none did.
double link_gbps_within(const std::vector<LinkRound>& rounds, Clock::time_point from, Clock::time_point to) {
  double bytes = 0;
  std::optional<Clock::time_point> first, last;
  for (const auto& r : rounds) {
    if (r.begin < from || r.end > to) continue;
    bytes += r.bytes;
    if (!first || r.begin < *first) first = r.begin;
    if (!last || r.end > *last) last = r.end;
  }
  if (!first) return 0;
  const double ms = std::chrono::duration<double, std::milli>(*last - *first).count();
  return ms > 0 ? bytes / (ms * 1e6) : 0;
}

// Runs `measure(ring)` while the copy engines stream both ways through the
// slot ring the measurement stages into and out of, as a pipeline's copy
// engines read the slots its threads have just written and write the ones
// they read next (so the link's traffic can stay in the last-level cache,
// as a run's does); records what the link moved meanwhile
// (HostCopyRates::link_gbps).
template <typename Measure>
HostCopyRates while_link_streams(int device, Measure&& measure) {
  const DeviceScope scope(device);
  constexpr std::size_t bytes = slot_ring_bytes;
  constexpr int copies_per_round = 16;
  Stream in, out;
  PinnedBuffer<std::byte> ring_in(bytes), ring_out(bytes);
  std::memset(ring_in.data(), 1, bytes);
  std::memset(ring_out.data(), 3, bytes);
  DeviceBuffer<std::byte> dev_in(bytes, in), dev_out(bytes, in);
  SLUICE_CUDA_CHECK(cudaMemsetAsync(dev_out.data(), 2, bytes, in.get()));
  in.synchronize();
  std::atomic<bool> stop{false};
  std::exception_ptr failure;
  std::vector<LinkRound> rounds;  // written by the link thread, read after it is joined
  std::thread link([&] {
    try {
      const DeviceScope link_scope(device);
      while (!stop.load()) {
        LinkRound round{Clock::now(), {}, 2.0 * copies_per_round * static_cast<double>(bytes)};
        for (int k = 0; k < copies_per_round; ++k) {
          SLUICE_CUDA_CHECK(cudaMemcpyAsync(dev_in.data(), ring_in.data(), bytes, cudaMemcpyHostToDevice, in.get()));
          SLUICE_CUDA_CHECK(cudaMemcpyAsync(ring_out.data(), dev_out.data(), bytes, cudaMemcpyDeviceToHost, out.get()));
        }
        in.synchronize();
        out.synchronize();
        round.end = Clock::now();
        rounds.push_back(round);
      }
    } catch (...) {
      failure = std::current_exception();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the copies are running
  HostCopyRates rates;
  const auto from = Clock::now();
  try {
    rates = measure(SlotRing{ring_in.data(), ring_out.data(), bytes});
  } catch (...) {
    stop = true;
    link.join();
    throw;
  }
  const auto to = Clock::now();
  stop = true;
  link.join();
  if (failure) std::rethrow_exception(failure);
  rates.link_gbps = link_gbps_within(rounds, from, to);
  return rates;
}

}  // namespace

HostCopyRates measure_staging_rates(int device, StagingPool& pool) {
  return while_link_streams(device, [&](SlotRing ring) { return measure_host_copy_rates(pool, host_copy_bytes, 3, ring); });
}

HostCopyRates measure_staging_rates(int device, StagingPool& pool, const HostRegions& regions) {
  return while_link_streams(device, [&](SlotRing ring) { return measure_host_copy_rates(pool, regions, 3, ring); });
}

namespace {

std::mutex cache_mutex;
std::map<std::pair<int, unsigned>, HostCopyRates> cache;

}  // namespace

HostCopyRates staging_rates(int device, StagingPool& pool) {
  std::lock_guard lock(cache_mutex);
  const auto key = std::make_pair(device, pool.thread_count());
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, measure_staging_rates(device, pool)).first;
  return it->second;
}

HostCopyRates refresh_staging_rates(int device, StagingPool& pool) {
  const HostCopyRates now = measure_staging_rates(device, pool);
  std::lock_guard lock(cache_mutex);
  HostCopyRates& best = cache[std::make_pair(device, pool.thread_count())];
  best = fastest_of(best, now);
  return best;
}

}  // namespace sluice
