// Why pinned memory? The copy engines can only read page-locked memory, so a
// copy from pageable memory goes through a driver staging buffer: slower, and
// cudaMemcpyAsync from pageable memory is not really asynchronous.
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "demo.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/event_timer.hpp"
#include "sluice/core/host_registration.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/measure/stats.hpp"

namespace sluice::demo {

DemoResult run_pinned_vs_pageable(const DemoOptions& o) {
  const std::size_t bytes = size_or(o, std::size_t{256} << 20);
  const int repeats = repeats_or(o, 5);
  Stream stream;
  DeviceBuffer<char> device(bytes, stream);
  std::vector<char> pageable(bytes), back(bytes);
  for (std::size_t i = 0; i < bytes; ++i) pageable[i] = static_cast<char>(i * 31 + 7);
  PinnedBuffer<char> pinned(bytes);
  std::memcpy(pinned.data(), pageable.data(), bytes);
  std::vector<char> to_register(pageable);
  HostRegistration registration(to_register.data(), bytes);

  DemoResult r = make_result("pinned-vs-pageable", "why pinned memory?", {"source", "H2D GB/s", "D2H GB/s", "host blocked in H2D call, ms", "H2D copy, ms"});
  bool round_trips = true;
  auto measure = [&](const char* name, char* host) {
    auto copy = [&](cudaMemcpyKind kind) {
      return summarize(time_with_events(stream, 1, repeats, [&](StreamView s) {
               void* dst = kind == cudaMemcpyHostToDevice ? static_cast<void*>(device.data()) : host;
               const void* src = kind == cudaMemcpyHostToDevice ? static_cast<const void*>(host) : device.data();
               SLUICE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s.get()));
             })).median;
    };
    const double h2d_ms = copy(cudaMemcpyHostToDevice);
    // How long does the "asynchronous" call hold the host?
    std::vector<double> blocked;
    for (int i = 0; i < repeats; ++i) {
      const auto begin = std::chrono::steady_clock::now();
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(device.data(), host, bytes, cudaMemcpyHostToDevice, stream.get()));
      blocked.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count());
      stream.synchronize();
    }
    std::fill(back.begin(), back.end(), 0);
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(back.data(), device.data(), bytes, cudaMemcpyDeviceToHost, stream.get()));
    stream.synchronize();
    round_trips &= std::memcmp(back.data(), pageable.data(), bytes) == 0;
    const double d2h_ms = copy(cudaMemcpyDeviceToHost);
    const double blocked_ms = summarize(blocked).median;
    r.rows.push_back({name, fixed(gb_per_s(static_cast<double>(bytes), h2d_ms), 1),
                      fixed(gb_per_s(static_cast<double>(bytes), d2h_ms), 1), fixed(blocked_ms, 3), fixed(h2d_ms, 3)});
    r.figures[std::string(name) + " h2d GB/s"] = gb_per_s(static_cast<double>(bytes), h2d_ms);
    r.figures[std::string(name) + " host blocked ms"] = blocked_ms;
    return std::pair{h2d_ms, blocked_ms};
  };
  const auto [pageable_ms, pageable_blocked] = measure("pageable", pageable.data());
  const auto [pinned_ms, pinned_blocked] = measure("pinned", pinned.data());
  measure("registered", to_register.data());

  r.verified = round_trips;
  r.verification = "each source copied to the device and back, compared byte for byte";
  r.conclusion = fmt::format(
      "pinned H2D ran {:.1f}x the speed of pageable; the pageable cudaMemcpyAsync held the host for {:.0f}% of its "
      "copy time, the pinned one for {:.1f}% - only pinned copies let the host (and other streams) get on with work",
      pageable_ms / pinned_ms, 100.0 * pageable_blocked / pageable_ms, 100.0 * pinned_blocked / pinned_ms);
  return r;
}

}  // namespace sluice::demo
