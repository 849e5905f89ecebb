#include "host_rates.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "core/streaming_copy.hpp"

namespace sluice {

namespace {

template <typename Work>
double best_gbps(double bytes, int repeats, Work&& work) {
  double best = 0;
  for (int i = 0; i < repeats; ++i) {
    const auto begin = std::chrono::steady_clock::now();
    work();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    if (ms > 0) best = std::max(best, bytes / (ms * 1e6));
  }
  return best;
}

}  // namespace

HostCopyRates measure_host_copy_rates(StagingPool& pool, const HostRegions& regions, int repeats, SlotRing ring) {
  // A ring of the pipeline's slot scale unless given one, written first so page faults stay out of the timing.
  std::unique_ptr<std::byte[]> own_in, own_out;
  if (ring.bytes == 0) {
    own_in = std::make_unique<std::byte[]>(slot_ring_bytes);
    own_out = std::make_unique<std::byte[]>(slot_ring_bytes);
    std::memset(own_in.get(), 0, slot_ring_bytes);
    std::memset(own_out.get(), 0x11, slot_ring_bytes);
    ring = {own_in.get(), own_out.get(), slot_ring_bytes};
  }
  const std::size_t ring_bytes = ring.bytes;
  if (ring_bytes % StagingPool::default_piece_bytes != 0)  // a piece must not run past the ring's end
    throw std::invalid_argument("host copy rates: the slot ring must be a whole number of 1 MiB pieces");
  char* const in_dst = reinterpret_cast<char*>(ring.in);
  const auto* const in_src = reinterpret_cast<const char*>(regions.in);
  auto* const out_dst = reinterpret_cast<char*>(regions.out);
  const char* const out_src = reinterpret_cast<const char*>(ring.out);
  auto stage_in = [=](std::size_t offset, std::size_t length) { std::memcpy(in_dst + offset % ring_bytes, in_src + offset, length); };
  auto stage_out = [=](std::size_t offset, std::size_t length) {
    detail::copy_streaming(out_dst + offset, out_src + offset % ring_bytes, length);
  };
  const std::size_t in_bytes = in_src ? regions.in_bytes : 0, out_bytes = out_dst ? regions.out_bytes : 0;
  auto measure_in_pieces_of = [&](std::size_t piece) {
    HostCopyRates rates;
    rates.threads = pool.thread_count();
    if (in_bytes > 0)
      rates.stage_in_gbps = best_gbps(static_cast<double>(in_bytes), repeats, [&] { pool.run(in_bytes, piece, stage_in); });
    if (out_bytes > 0)
      rates.stage_out_gbps = best_gbps(static_cast<double>(out_bytes), repeats, [&] { pool.run(out_bytes, piece, stage_out); });
    if (in_bytes > 0 && out_bytes > 0)
      rates.both_gbps = best_gbps(static_cast<double>(in_bytes + out_bytes), repeats, [&] {
        auto in = pool.submit(in_bytes, piece, stage_in);
        auto out = pool.submit(out_bytes, piece, stage_out);
        in->wait();
        out->wait();
      });
    return rates;
  };
  // A pipeline cuts a staged chunk of a few MiB into a piece per thread
  // (StagingPool::piece_bytes_for), a few hundred KiB each; scratch copies
  // use whole MiB. Either may be faster on a host, and a bound takes the
  // faster: with 1 MiB pieces alone, staged runs in 4 MiB chunks read up to
  // 1.03 of it.
  return fastest_of(measure_in_pieces_of(StagingPool::default_piece_bytes), measure_in_pieces_of(staged_piece_bytes));
}

HostCopyRates measure_host_copy_rates(StagingPool& pool, std::size_t bytes, int repeats, SlotRing ring) {
  bytes = std::max(bytes, slot_ring_bytes);
  // Written first, so page faults stay out of the timing.
  auto big_in = std::make_unique<std::byte[]>(bytes), big_out = std::make_unique<std::byte[]>(bytes);
  std::memset(big_in.get(), 0x5A, bytes);
  std::memset(big_out.get(), 0x33, bytes);
  return measure_host_copy_rates(pool, HostRegions{big_in.get(), bytes, big_out.get(), bytes}, repeats, ring);
}

HostCopyRates fastest_of(const HostCopyRates& a, const HostCopyRates& b) {
  HostCopyRates r;
  r.stage_in_gbps = std::max(a.stage_in_gbps, b.stage_in_gbps);
  r.stage_out_gbps = std::max(a.stage_out_gbps, b.stage_out_gbps);
  r.both_gbps = std::max(a.both_gbps, b.both_gbps);
  r.threads = std::max(a.threads, b.threads);
  r.link_gbps = std::max(a.link_gbps, b.link_gbps);
  return r;
}

HostCopyRates host_copy_rates(StagingPool& pool) {
  static std::mutex mutex;
  static std::map<unsigned, HostCopyRates> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(pool.thread_count());
  if (it == cache.end()) it = cache.emplace(pool.thread_count(), measure_host_copy_rates(pool)).first;
  return it->second;
}

}  // namespace sluice
