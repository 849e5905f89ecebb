#include "link_rates.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "sluice/core/device_buffer.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/event.hpp"
#include "sluice/core/event_timer.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"

namespace sluice {

namespace {

std::mutex cache_mutex;
std::map<int, LinkRates> cache;

// Copies `h2d_bytes` in and `d2h_bytes` out at once, each split over half of
// `streams`, forked from and joined back to `origin`.
void copies(StreamView origin, std::vector<Stream>& streams, std::vector<Event>& joins, Event& fork,
            std::size_t h2d_bytes, std::size_t d2h_bytes, char* device_in, char* device_out, char* host_in,
            char* host_out) {
  fork.record(origin);
  const std::size_t lanes = streams.size() / 2;
  for (std::size_t k = 0; k < lanes; ++k) {
    const auto piece = [&](std::size_t bytes) {
      const std::size_t part = bytes / lanes, offset = k * part;
      return std::pair{offset, k + 1 == lanes ? bytes - offset : part};
    };
    if (h2d_bytes > 0) {
      const auto [offset, length] = piece(h2d_bytes);
      streams[k].wait(fork);
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(device_in + offset, host_in + offset, length, cudaMemcpyHostToDevice, streams[k].get()));
    }
    if (d2h_bytes > 0) {
      const auto [offset, length] = piece(d2h_bytes);
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

// Of two measurements of one mix, the one that moved it sooner.
LinkPoint faster_point(const LinkPoint& a, const LinkPoint& b) {
  return a.h2d_gbps + a.d2h_gbps >= b.h2d_gbps + b.d2h_gbps ? a : b;
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
    auto best = [&](std::size_t h2d_bytes, std::size_t d2h_bytes) {
      const auto samples = time_with_events(origin, 1, repeats, [&](StreamView s) {
        copies(s, streams, joins, fork, h2d_bytes, d2h_bytes, device_in.data(), device_out.data(), host_in.data(),
               host_out.data());
      });
      return *std::min_element(samples.begin(), samples.end()) * 1e6;  // ns: bytes / ns = GB/s
    };
    rates.h2d_gbps = std::max(rates.h2d_gbps, b / best(bytes, 0));
    rates.d2h_gbps = std::max(rates.d2h_gbps, b / best(0, bytes));
    rates.both_gbps = std::max(rates.both_gbps, 2 * b / best(bytes, bytes));
    const std::size_t half = bytes / 2;
    const double h2d_heavy_ns = best(bytes, half), d2h_heavy_ns = best(half, bytes);
    rates.h2d_heavy = faster_point(rates.h2d_heavy, {b / h2d_heavy_ns, static_cast<double>(half) / h2d_heavy_ns});
    rates.d2h_heavy = faster_point(rates.d2h_heavy, {static_cast<double>(half) / d2h_heavy_ns, b / d2h_heavy_ns});
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
  return {std::max(a.h2d_gbps, b.h2d_gbps), std::max(a.d2h_gbps, b.d2h_gbps), std::max(a.both_gbps, b.both_gbps),
          faster_point(a.h2d_heavy, b.h2d_heavy), faster_point(a.d2h_heavy, b.d2h_heavy)};
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
