#include "sluice/measure/probe.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include "bound/host_rates.hpp"
#include "bound/staging_rates.hpp"
#include "core/staging_pool.hpp"
#include "fixed_costs.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/event.hpp"
#include "sluice/core/event_timer.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/host_fn.hpp"
#include "sluice/core/host_registration.hpp"
#include "sluice/core/host_timer.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"

namespace sluice {

namespace {

__global__ void empty_kernel() {}

constexpr std::size_t MiB = std::size_t{1} << 20;

int repeats_for(std::size_t bytes, int requested) {
  if (requested > 0) return requested;
  if (bytes >= 256 * MiB) return 5;
  if (bytes >= 16 * MiB) return 10;
  return 30;
}

Measurement measured(std::string name, std::size_t bytes, const std::vector<double>& samples,
                     std::size_t moved = 0) {
  Measurement m;
  m.name = std::move(name);
  m.bytes = bytes;
  m.moved = moved;
  m.ms = summarize(samples);
  return m;
}

void copy_async(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, StreamView s) {
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s.get()));
}

// A reference for what chunking costs on this link: every chunk of these
// bytes in and out again through the copy engines, with no kernel between.
// H2D on one stream, D2H on another; a chunk's D2H waits for its H2D, a
// slot's next H2D for its last D2H, so fill, drain and the wait between the
// copies cost what they cost a pipeline. A pipeline with a kernel between its
// copies pays the same and more; other shapes measured on the H200 (two
// streams each way, a staircase of 2-16 streams) did no better.
void measure_copy_through(ProbeResult& r, std::size_t bytes, int repeats, const char* host_in, char* host_out,
                          Stream& s1, Stream& s2) {
  constexpr std::size_t slots = 4, smallest_chunk = 64 << 10;
  Event fork, join;
  std::vector<Event> copied_in(slots), copied_out(slots);
  for (std::size_t chunks = 1; chunks <= 64; chunks *= 2) {
    const std::size_t chunk = (bytes + chunks - 1) / chunks;
    if (chunks > 1 && chunk < smallest_chunk) break;
    DeviceBuffer<char> ring(std::min(chunks, slots) * chunk, s1);
    const auto samples = time_with_events(s1, 1, repeats, [&](StreamView s) {
      fork.record(s);
      s2.wait(fork);
      for (std::size_t c = 0; c < chunks && c * chunk < bytes; ++c) {
        const std::size_t offset = c * chunk, length = std::min(chunk, bytes - offset), slot = c % slots;
        char* device = ring.data() + slot * chunk;
        if (c >= slots) s.wait(copied_out[slot]);
        copy_async(device, host_in + offset, length, cudaMemcpyHostToDevice, s);
        copied_in[slot].record(s);
        s2.wait(copied_in[slot]);
        copy_async(host_out + offset, device, length, cudaMemcpyDeviceToHost, s2);
        copied_out[slot].record(s2);
      }
      join.record(s2);
      s.wait(join);
    });
    Measurement m = measured("copy-through", bytes, samples, 2 * bytes);
    m.chunks = chunks;
    r.copy_through.push_back(m);
  }
}

void measure_size(ProbeResult& r, std::size_t bytes, int repeats, Stream& s1, Stream& s2) {
  PinnedBuffer<char> pinned_in(bytes), pinned_out(bytes);
  std::memset(pinned_in.data(), 0x5A, bytes);
  std::vector<char> pageable_in(bytes, 0x5A), pageable_out(bytes, 1);  // touched: no first-touch faults in timing
  DeviceBuffer<char> dev_a(bytes, s1), dev_b(bytes, s1);
  auto time = [&](auto&& work) { return time_with_events(s1, 1, repeats, work); };

  r.transfers.push_back(measured("h2d pinned", bytes, time([&](StreamView s) {
    copy_async(dev_a.data(), pinned_in.data(), bytes, cudaMemcpyHostToDevice, s);
  })));
  r.transfers.push_back(measured("d2h pinned", bytes, time([&](StreamView s) {
    copy_async(pinned_out.data(), dev_a.data(), bytes, cudaMemcpyDeviceToHost, s);
  })));
  r.transfers.push_back(measured("h2d pageable", bytes, time([&](StreamView s) {
    copy_async(dev_a.data(), pageable_in.data(), bytes, cudaMemcpyHostToDevice, s);
  })));
  r.transfers.push_back(measured("d2h pageable", bytes, time([&](StreamView s) {
    copy_async(pageable_out.data(), dev_a.data(), bytes, cudaMemcpyDeviceToHost, s);
  })));

  // Freshly registered memory: the registration is paid once per buffer, so it
  // is timed apart from the copies it enables.
  std::vector<char> registered(bytes, 0x33);
  const int cycles = std::min(repeats, 5);
  std::vector<double> register_ms, unregister_ms;
  for (int i = 0; i < cycles; ++i) {
    std::optional<HostRegistration> registration;
    register_ms.push_back(time_on_host(0, 1, [&] { registration.emplace(registered.data(), bytes); }).front());
    if (i == 0) {
      r.transfers.push_back(measured("h2d registered", bytes, time([&](StreamView s) {
        copy_async(dev_a.data(), registered.data(), bytes, cudaMemcpyHostToDevice, s);
      })));
      r.transfers.push_back(measured("d2h registered", bytes, time([&](StreamView s) {
        copy_async(registered.data(), dev_a.data(), bytes, cudaMemcpyDeviceToHost, s);
      })));
    }
    unregister_ms.push_back(time_on_host(0, 1, [&] { registration.reset(); }).front());
  }
  r.registration.push_back(measured("register", bytes, register_ms));
  r.registration.push_back(measured("unregister", bytes, unregister_ms));

  // Both directions at once: H2D on s1, D2H on s2, forked and joined by
  // events; equal bytes, then twice the bytes one way (the bound's link term
  // at unequal mixes, bound.hpp).
  Event fork, join;
  auto both_ways = [&](const char* name, std::size_t h2d_bytes, std::size_t d2h_bytes) {
    r.transfers.push_back(measured(name, bytes, time([&](StreamView s) {
      fork.record(s);
      s2.wait(fork);
      copy_async(dev_a.data(), pinned_in.data(), h2d_bytes, cudaMemcpyHostToDevice, s);
      copy_async(pinned_out.data(), dev_b.data(), d2h_bytes, cudaMemcpyDeviceToHost, s2);
      join.record(s2);
      s.wait(join);
    }), h2d_bytes + d2h_bytes));
  };
  both_ways("both ways pinned", bytes, bytes);
  both_ways("both ways 2:1 pinned", bytes, bytes / 2);
  both_ways("both ways 1:2 pinned", bytes / 2, bytes);
  r.transfers.push_back(measured("d2d", bytes, time([&](StreamView s) {
    copy_async(dev_b.data(), dev_a.data(), bytes, cudaMemcpyDeviceToDevice, s);
  })));
  measure_copy_through(r, bytes, repeats, pinned_in.data(), pinned_out.data(), s1, s2);
}

void measure_bandwidth(ProbeResult& r, const ProbeOptions& o, Stream& s1, Stream& s2) {
  for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    std::size_t free_bytes = 0, total_bytes = 0;
    SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    // Two buffers of the size, and the copy-through's ring (up to one more) beside them.
    if (3 * bytes > free_bytes / 10 * 9) {
      r.notes.push_back("sizes from " + format_bytes(bytes) + " skipped: three device buffers would not fit in free memory");
      break;
    }
    measure_size(r, bytes, repeats_for(bytes, o.repeats), s1, s2);
  }
}

void measure_host_copies(ProbeResult& r, const ProbeOptions& o) {
  const std::size_t bytes = std::min<std::size_t>(256 * MiB, o.max_bytes);
  std::vector<char> src(bytes, 0x5A), dst(bytes, 1);
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const unsigned limit = o.max_host_threads > 0 ? o.max_host_threads : hardware;
  for (unsigned threads = 1;; threads = std::min(threads * 2, limit)) {
    StagingPool pool(threads);
    Measurement m = measured("host memcpy", bytes, time_on_host(1, repeats_for(bytes, o.repeats), [&] {
                               pool.copy(dst.data(), src.data(), bytes);
                             }));
    m.threads = threads;
    r.host_copies.push_back(m);
    if (threads == limit) break;
  }
}

// Per-operation host time of `batch` submissions; `settle` runs untimed after each batch.
template <typename Submit, typename Settle>
Measurement per_operation(std::string name, int batch, int repeats, Submit submit, Settle settle) {
  std::vector<double> samples;
  for (int i = -1; i < repeats; ++i) {  // i == -1 is the warm-up
    const auto begin = std::chrono::steady_clock::now();
    for (int k = 0; k < batch; ++k) submit();
    const auto end = std::chrono::steady_clock::now();
    settle();
    if (i >= 0) samples.push_back(std::chrono::duration<double, std::milli>(end - begin).count() / batch);
  }
  return measured(std::move(name), 0, samples);
}

// What the staging threads move at their best (host_rates.hpp), as three
// host-copy rows the model reads back: "stage in", "stage out", "stage both";
// and both ways while the link streams, with what the link moved meanwhile:
// "stage both beside the link", "link beside staging" (staging_rates.hpp).
void measure_staging(ProbeResult& r) {
  StagingPool pool;
  const HostCopyRates rates = measure_host_copy_rates(pool);
  const HostCopyRates shared = measure_staging_rates(r.device.ordinal, pool);
  constexpr std::size_t bytes = 512 * MiB;
  for (const auto& [name, gbps, moved] : {std::tuple{"stage in", rates.stage_in_gbps, bytes},
                                           std::tuple{"stage out", rates.stage_out_gbps, bytes},
                                           std::tuple{"stage both", rates.both_gbps, 2 * bytes},
                                           std::tuple{"stage both beside the link", shared.both_gbps, 2 * bytes},
                                           std::tuple{"link beside staging", shared.link_gbps, 2 * bytes}}) {
    if (gbps <= 0) continue;
    const double ms = static_cast<double>(moved) / (gbps * 1e6);
    Measurement m = measured(name, bytes, {ms}, moved == bytes ? 0 : moved);
    m.threads = rates.threads;
    r.host_copies.push_back(m);
  }
}

void measure_fixed_costs(ProbeResult& r, Stream& s1, Stream& s2) {
  const int repeats = 15;
  auto settle = [&] { s1.synchronize(); s2.synchronize(); };
  auto nothing = [] {};
  r.fixed_costs.push_back(per_operation("kernel launch (submit)", 256, repeats, [&] {
    empty_kernel<<<1, 1, 0, s1.get()>>>();
    SLUICE_CUDA_CHECK(cudaGetLastError());
  }, settle));
  r.fixed_costs.push_back(per_operation("kernel launch to completion", 64, repeats, [&] {
    empty_kernel<<<1, 1, 0, s1.get()>>>();
    SLUICE_CUDA_CHECK(cudaGetLastError());
    s1.synchronize();
  }, nothing));
  PinnedBuffer<int> word(1);
  DeviceBuffer<int> dev_word(1, s1);
  r.fixed_costs.push_back(per_operation("cudaMemcpyAsync submit (4 B pinned)", 256, repeats, [&] {
    copy_async(dev_word.data(), word.data(), sizeof(int), cudaMemcpyHostToDevice, s1);
  }, settle));
  Event event;
  r.fixed_costs.push_back(per_operation("event record", 256, repeats, [&] { event.record(s1); }, settle));
  r.fixed_costs.push_back(per_operation("cudaStreamWaitEvent", 256, repeats, [&] { s2.wait(event); }, settle));
  // The fixed costs the model uses (model.hpp), by the names it reads back.
  const FixedCosts model = sluice::measure_fixed_costs(r.device.ordinal);
  r.fixed_costs.push_back(measured("model: copy latency", 0, {model.copy_ms}));
  r.fixed_costs.push_back(measured("model: kernel start after its event", 0, {model.launch_ms}));
  r.fixed_costs.push_back(measured("model: blocked thread wake-up", 0, {model.wake_ms}));
  r.fixed_costs.push_back(measured("model: host work per chunk", 0, {model.chunk_ms}));
  r.fixed_costs.push_back(measured("model: staging job hand-off", 0, {model.stage_ms}));
  r.fixed_costs.push_back(measured("model: a run's own start and end", 0, {model.run_ms}));
  r.fixed_costs.push_back(per_operation("host function round trip", 64, repeats, [&] {
    std::atomic<bool> done{false};
    enqueue_host(s1, [&done] { done.store(true, std::memory_order_release); });
    while (!done.load(std::memory_order_acquire)) {}
  }, settle));
}

}  // namespace

ProbeResult run_probe(const ProbeOptions& o) {
  if (o.min_bytes == 0 || o.max_bytes < o.min_bytes)
    throw std::invalid_argument("probe sizes: need 0 < min_bytes <= max_bytes");
  Device device(o.device);
  const DeviceScope scope(o.device);  // the caller's current device comes back after the probe
  ProbeResult r;
  r.device = device.info();
  Stream s1, s2;
  if (o.bandwidth) measure_bandwidth(r, o, s1, s2);
  if (o.host_copies) {
    measure_host_copies(r, o);
    measure_staging(r);
  }
  if (o.fixed_costs) measure_fixed_costs(r, s1, s2);
  device.synchronize();
  return r;
}

}  // namespace sluice
