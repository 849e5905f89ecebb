// Managed memory moves itself: the first touch on the other side faults pages
// across one by one. cudaMemPrefetchAsync moves it in bulk, in stream order;
// explicit copies on a stream are the reference.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "demo.hpp"
#include "kernels.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"

namespace sluice::demo {

namespace {
float input(std::size_t i) { return static_cast<float>(i % 1021) * 0.25f + 0.5f; }

// Reads one float per page: enough to bring every page of the result to the host.
float touch_pages(const float* y, std::size_t n) {
  float sum = 0;
  for (std::size_t i = 0; i < n; i += 4096 / sizeof(float)) sum += y[i];
  return sum;
}

bool check(const float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (y[i] != input(i) * 2.0f + 1.0f) return false;
  return true;
}

// Input written by the host, y = 2x + 1 on the GPU, result touched by the
// host: the time from the first GPU call until every result page is readable
// on the host. The full check runs after the clock stops.
double managed_round_trip(float* x, std::size_t n, int device, Stream& s, bool prefetch, bool& ok) {
  for (std::size_t i = 0; i < n; ++i) x[i] = input(i);  // pages now live on the host
  const auto begin = std::chrono::steady_clock::now();
  if (prefetch)
    SLUICE_CUDA_CHECK(cudaMemPrefetchAsync(x, n * sizeof(float), cudaMemLocation{cudaMemLocationTypeDevice, device}, 0, s.get()));
  launch_affine(s, x, x, n, 2.0f, 1.0f);
  if (prefetch)
    SLUICE_CUDA_CHECK(cudaMemPrefetchAsync(x, n * sizeof(float), cudaMemLocation{cudaMemLocationTypeHost, 0}, 0, s.get()));
  s.synchronize();
  volatile float sink = touch_pages(x, n);
  (void)sink;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  ok = check(x, n);
  return ms;
}
}  // namespace

DemoResult run_unified_memory(const DemoOptions& o) {
  std::size_t free_bytes = 0, total = 0;
  SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  // Never ask for more managed memory than the device has free.
  const std::size_t bytes = std::min(size_or(o, std::size_t{256} << 20), free_bytes / 4);
  const std::size_t n = bytes / sizeof(float);
  int device = 0;
  SLUICE_CUDA_CHECK(cudaGetDevice(&device));
  Stream s;
  DemoResult r = make_result("unified-memory", "what does managed memory cost, with and without prefetch?",
               {"method", "ms (GPU work until the result is on the host)", "GB/s each way"});

  float* managed = nullptr;
  SLUICE_CUDA_CHECK(cudaMallocManaged(reinterpret_cast<void**>(&managed), bytes));
  bool faults_ok = false, prefetch_ok = false;
  managed_round_trip(managed, n, device, s, true, prefetch_ok);  // warm-up: first-touch allocation
  const double faults_ms = managed_round_trip(managed, n, device, s, false, faults_ok);
  const double prefetch_ms = managed_round_trip(managed, n, device, s, true, prefetch_ok);
  SLUICE_CUDA_CHECK(cudaFree(managed));

  PinnedBuffer<float> host(n);
  DeviceBuffer<float> dev(n, s);
  auto explicit_trip = [&] {
    for (std::size_t i = 0; i < n; ++i) host[i] = input(i);
    const auto begin = std::chrono::steady_clock::now();
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(dev.data(), host.data(), bytes, cudaMemcpyHostToDevice, s.get()));
    launch_affine(s, dev.data(), dev.data(), n, 2.0f, 1.0f);
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(host.data(), dev.data(), bytes, cudaMemcpyDeviceToHost, s.get()));
    s.synchronize();
    volatile float sink = touch_pages(host.data(), n);
    (void)sink;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    return std::pair{ms, check(host.data(), n)};
  };
  explicit_trip();
  const auto [explicit_ms, explicit_ok] = explicit_trip();

  const double b = static_cast<double>(bytes);
  r.rows.push_back({"managed, page faults", fixed(faults_ms, 2), fixed(b / (faults_ms * 1e6 / 2), 1)});
  r.rows.push_back({"managed + cudaMemPrefetchAsync", fixed(prefetch_ms, 2), fixed(b / (prefetch_ms * 1e6 / 2), 1)});
  r.rows.push_back({"pinned + explicit cudaMemcpyAsync", fixed(explicit_ms, 2), fixed(b / (explicit_ms * 1e6 / 2), 1)});
  r.figures = {{"faults_ms", faults_ms}, {"prefetch_ms", prefetch_ms}, {"explicit_ms", explicit_ms}, {"bytes", b}};
  r.verified = faults_ok && prefetch_ok && explicit_ok;
  r.verification = fmt::format("all {} results compared with 2 * input + 1 on the host, each method", n);
  r.conclusion = fmt::format(
      "for {:.0f} MiB, letting pages fault across took {:.1f} ms, prefetching {:.1f} ms ({:.1f}x faster), explicit "
      "copies from pinned memory {:.1f} ms",
      b / (1 << 20), faults_ms, prefetch_ms, faults_ms / prefetch_ms, explicit_ms);
  return r;
}

}  // namespace sluice::demo
