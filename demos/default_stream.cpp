// The legacy default stream synchronises with every blocking stream, so one
// innocent call on it serialises work that could overlap. Non-blocking
// streams and per-thread default streams avoid that. Likewise cudaFree waits
// for the whole device, while stream-ordered cudaFreeAsync does not.
#include <fmt/format.h>

#include <chrono>
#include <thread>
#include <vector>

#include "demo.hpp"
#include "kernels.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/stream.hpp"

namespace sluice::demo {

namespace {
constexpr std::uint64_t kernel_ns = 10'000'000;  // 10 ms

template <typename Work>
double timed_ms(Work&& work) {
  SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto begin = std::chrono::steady_clock::now();
  work();
  SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
}

// Kernel on a, a 4-byte memset on the legacy default stream, kernel on b.
double two_kernels_with_null_stream_call(StreamFlags flags, int* done, int* scratch) {
  Stream a(0, flags), b(0, flags);
  return timed_ms([&] {
    launch_sleep(a, kernel_ns, nullptr, nullptr, done);
    SLUICE_CUDA_CHECK(cudaMemsetAsync(scratch, 0, sizeof(int), cudaStreamLegacy));
    launch_sleep(b, kernel_ns, nullptr, nullptr, done + 1);
  });
}

// Two host threads, each launching one kernel on `stream`.
double two_threads_on(cudaStream_t stream, int* done) {
  return timed_ms([&] {
    std::thread first([&] { launch_sleep(StreamView(stream), kernel_ns, nullptr, nullptr, done); });
    std::thread second([&] { launch_sleep(StreamView(stream), kernel_ns, nullptr, nullptr, done + 1); });
    first.join();
    second.join();
  });
}

// Kernels alternating over two streams, each with a scratch buffer allocated and freed around it.
double alloc_in_loop(bool stream_ordered, int* done, int iterations) {
  Stream streams[2];
  return timed_ms([&] {
    for (int i = 0; i < iterations; ++i) {
      Stream& s = streams[i % 2];
      void* scratch = nullptr;
      if (stream_ordered) SLUICE_CUDA_CHECK(cudaMallocAsync(&scratch, 1 << 20, s.get()));
      else SLUICE_CUDA_CHECK(cudaMalloc(&scratch, 1 << 20));
      launch_sleep(s, kernel_ns / 10, nullptr, nullptr, done + i);
      if (stream_ordered) SLUICE_CUDA_CHECK(cudaFreeAsync(scratch, s.get()));
      else SLUICE_CUDA_CHECK(cudaFree(scratch));
    }
  });
}
}  // namespace

DemoResult run_default_stream(const DemoOptions&) {
  constexpr int iterations = 20;
  DeviceBuffer<int> flags(64, StreamView());
  int* done = flags.data();
  auto reset = [&] {
    SLUICE_CUDA_CHECK(cudaMemsetAsync(done, 0, flags.bytes(), cudaStreamPerThread));
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  };
  auto count_done = [&] {
    std::vector<int> host(64);
    SLUICE_CUDA_CHECK(cudaMemcpy(host.data(), done, flags.bytes(), cudaMemcpyDeviceToHost));
    int n = 0;
    for (int f : host) n += f;
    return n;
  };
  DemoResult r = make_result("default-stream", "what does the legacy default stream, or cudaFree, do to overlap?",
               {"case", "ms", "ideal if overlapped", "serialised"});
  bool ok = true;
  two_kernels_with_null_stream_call(StreamFlags::non_blocking, done, done + 32);  // warm-up

  auto add = [&](const std::string& what, double ms, double ideal, double serial, int expected_done) {
    ok &= count_done() == expected_done;
    r.rows.push_back({what, fixed(ms, 2), fixed(ideal, 0), fixed(serial, 0)});
    r.figures[what] = ms;
    return ms;
  };
  reset();
  const double blocking = add("2 x 10 ms kernels, blocking streams, a legacy-stream memset between",
                              two_kernels_with_null_stream_call(StreamFlags::blocking, done, done + 32), 10, 20, 2);
  reset();
  const double non_blocking = add("same, non-blocking streams",
                                  two_kernels_with_null_stream_call(StreamFlags::non_blocking, done, done + 32), 10, 20, 2);
  reset();
  const double legacy_threads = add("2 host threads, each a 10 ms kernel on the legacy default stream",
                                    two_threads_on(cudaStreamLegacy, done), 10, 20, 2);
  reset();
  const double per_thread = add("same, each on its per-thread default stream", two_threads_on(cudaStreamPerThread, done), 10, 20, 2);
  reset();
  const double with_free = add(fmt::format("{} x 1 ms kernels on 2 streams, cudaMalloc/cudaFree around each", iterations),
                               alloc_in_loop(false, done, iterations), iterations / 2.0, iterations, iterations);
  reset();
  const double with_async = add("same, cudaMallocAsync/cudaFreeAsync", alloc_in_loop(true, done, iterations),
                                iterations / 2.0, iterations, iterations);
  r.verified = ok;
  r.verification = "every kernel set its done flag";
  r.conclusion = fmt::format(
      "one memset on the legacy stream made two 10 ms kernels take {:.1f} ms with blocking streams, {:.1f} ms with "
      "non-blocking ones; two threads took {:.1f} ms on the legacy stream, {:.1f} ms on per-thread default streams; "
      "cudaFree in the loop took {:.1f} ms against {:.1f} ms stream-ordered",
      blocking, non_blocking, legacy_threads, per_thread, with_free, with_async);
  return r;
}

}  // namespace sluice::demo
