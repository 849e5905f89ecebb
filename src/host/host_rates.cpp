#include "sluice/host_rates.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "streaming_copy.hpp"

namespace sluice {

namespace {

constexpr std::size_t ring_bytes = std::size_t{64} << 20;

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

HostCopyRates measure_host_copy_rates(StagingPool& pool, std::size_t bytes, int repeats) {
  bytes = std::max(bytes, ring_bytes);
  // Written first, so page faults stay out of the timing.
  auto big_in = std::make_unique<char[]>(bytes), big_out = std::make_unique<char[]>(bytes);
  auto ring_in = std::make_unique<char[]>(ring_bytes), ring_out = std::make_unique<char[]>(ring_bytes);
  std::memset(big_in.get(), 0x5A, bytes);
  std::memset(big_out.get(), 0x33, bytes);
  std::memset(ring_in.get(), 0, ring_bytes);
  std::memset(ring_out.get(), 0x11, ring_bytes);
  const std::size_t piece = StagingPool::default_piece_bytes;
  char* const in_dst = ring_in.get();
  const char* const in_src = big_in.get();
  char* const out_dst = big_out.get();
  const char* const out_src = ring_out.get();
  auto stage_in = [=](std::size_t offset, std::size_t length) { std::memcpy(in_dst + offset % ring_bytes, in_src + offset, length); };
  auto stage_out = [=](std::size_t offset, std::size_t length) {
    detail::copy_streaming(out_dst + offset, out_src + offset % ring_bytes, length);
  };
  HostCopyRates rates;
  rates.threads = pool.thread_count();
  const double b = static_cast<double>(bytes);
  rates.stage_in_gbps = best_gbps(b, repeats, [&] { pool.run(bytes, piece, stage_in); });
  rates.stage_out_gbps = best_gbps(b, repeats, [&] { pool.run(bytes, piece, stage_out); });
  rates.both_gbps = best_gbps(2 * b, repeats, [&] {
    auto in = pool.submit(bytes, piece, stage_in);
    auto out = pool.submit(bytes, piece, stage_out);
    in->wait();
    out->wait();
  });
  return rates;
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
