#include "sluice/link_rates.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "sluice/device_buffer.hpp"
#include "sluice/device_scope.hpp"
#include "sluice/error.hpp"
#include "sluice/event.hpp"
#include "sluice/event_timer.hpp"
#include "sluice/pinned_buffer.hpp"
#include "sluice/stream.hpp"

namespace sluice {

namespace {

std::mutex cache_mutex;
std::map<int, LinkRates> cache;

// Copies `bytes` split over `streams` streams per direction, forked from and joined back to `origin`.
void copies(StreamView origin, std::vector<Stream>& streams, std::vector<Event>& joins, Event& fork,
            std::size_t bytes, bool h2d, bool d2h, char* device_in, char* device_out, char* host_in, char* host_out) {
  fork.record(origin);
  const std::size_t lanes = streams.size() / 2;
  const std::size_t part = bytes / lanes;
  for (std::size_t k = 0; k < lanes; ++k) {
    const std::size_t offset = k * part, length = k + 1 == lanes ? bytes - offset : part;
    if (h2d) {
      streams[k].wait(fork);
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(device_in + offset, host_in + offset, length, cudaMemcpyHostToDevice, streams[k].get()));
    }
    if (d2h) {
      streams[lanes + k].wait(fork);
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(host_out + offset, device_out + offset, length, cudaMemcpyDeviceToHost,
                                        streams[lanes + k].get()));
    }
  }
  for (std::size_t k = 0; k < streams.size(); ++k) {
    joins[k].record(streams[k]);
    origin.wait(joins[k]);
  }
}

}  // namespace

LinkRates measure_link_rates(int device, std::size_t bytes, int repeats) {
  const DeviceScope scope(device);
  Stream origin;
  PinnedBuffer<char> host_in(bytes), host_out(bytes);
  std::memset(host_in.data(), 0x5A, bytes);
  std::memset(host_out.data(), 0, bytes);
  DeviceBuffer<char> device_in(bytes, origin), device_out(bytes, origin);
  SLUICE_CUDA_CHECK(cudaMemsetAsync(device_out.data(), 1, bytes, origin.get()));
  LinkRates rates;
  const double b = static_cast<double>(bytes);
  for (std::size_t per_direction : {1, 2}) {
    std::vector<Stream> streams(2 * per_direction);
    std::vector<Event> joins(streams.size());
    Event fork;
    auto best = [&](bool h2d, bool d2h) {
      const auto samples = time_with_events(origin, 1, repeats, [&](StreamView s) {
        copies(s, streams, joins, fork, bytes, h2d, d2h, device_in.data(), device_out.data(), host_in.data(),
               host_out.data());
      });
      return *std::min_element(samples.begin(), samples.end());
    };
    rates.h2d_gbps = std::max(rates.h2d_gbps, b / (best(true, false) * 1e6));
    rates.d2h_gbps = std::max(rates.d2h_gbps, b / (best(false, true) * 1e6));
    rates.both_gbps = std::max(rates.both_gbps, 2 * b / (best(true, true) * 1e6));
  }
  origin.synchronize();
  return rates;
}

LinkRates link_rates(int device) {
  std::lock_guard lock(cache_mutex);
  auto it = cache.find(device);
  if (it == cache.end()) it = cache.emplace(device, measure_link_rates(device)).first;
  return it->second;
}

LinkRates fastest_of(const LinkRates& a, const LinkRates& b) {
  return {std::max(a.h2d_gbps, b.h2d_gbps), std::max(a.d2h_gbps, b.d2h_gbps), std::max(a.both_gbps, b.both_gbps)};
}

LinkRates refresh_link_rates(int device) {
  const LinkRates now = measure_link_rates(device);
  std::lock_guard lock(cache_mutex);
  LinkRates& best = cache[device];
  best = fastest_of(best, now);
  return best;
}

void remember_link_rates(int device, const LinkRates& rates) {
  std::lock_guard lock(cache_mutex);
  cache[device] = rates;
}

}  // namespace sluice
