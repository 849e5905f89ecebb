#include "fixed_costs.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/staging_pool.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/event.hpp"
#include "sluice/core/event_timer.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/measure/stats.hpp"
#include "sluice/pipeline/pipeline.hpp"

namespace sluice {

namespace {

__global__ void spin_for(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}

__global__ void copy_items(const float* in, float* out, std::size_t n) {
  const std::size_t i = threadIdx.x;
  if (i < n) out[i] = in[i];
}

double median_of(std::vector<double> samples) { return summarize(samples).median; }

}  // namespace

FixedCosts measure_fixed_costs(int device) {
  const DeviceScope scope(device);
  using Clock = std::chrono::steady_clock;
  Stream stream, other;
  FixedCosts costs;
  constexpr std::size_t small = std::size_t{64} << 10, large = std::size_t{16} << 20;
  PinnedBuffer<char> host(large);
  DeviceBuffer<char> dev(large, stream);
  auto copy_ms = [&](std::size_t bytes) {
    return median_of(time_with_events(stream, 2, 15, [&](StreamView s) {
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(dev.data(), host.data(), bytes, cudaMemcpyHostToDevice, s.get()));
    }));
  };
  costs.copy_ms = fit_latency_rate(small, copy_ms(small), large, copy_ms(large)).latency_ms;

  // A kernel queued behind an event in another stream: from the event to the kernel's end.
  int khz = 0;
  SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
  Event ready(Event::Timing::enabled), finished(Event::Timing::enabled);
  std::vector<double> starts;
  for (int i = 0; i < 20; ++i) {
    spin_for<<<1, 1, 0, other.get()>>>(static_cast<long long>(khz) / 10);  // 100 us: the kernel below is queued first
    ready.record(other);
    stream.wait(ready);
    spin_for<<<1, 1, 0, stream.get()>>>(0);
    finished.record(stream);
    finished.synchronize();
    if (i >= 2) starts.push_back(elapsed_ms(ready, finished));
  }
  costs.launch_ms = median_of(starts);

  // A thread blocked on an event, woken when a 200 us kernel ends.
  Event blocking(Event::Timing::disabled, Event::Wait::block);
  std::vector<double> wakes;
  const double spin_ms = 0.2;
  for (int i = 0; i < 15; ++i) {
    Event begin(Event::Timing::enabled), end(Event::Timing::enabled);
    begin.record(stream);
    spin_for<<<1, 1, 0, stream.get()>>>(static_cast<long long>(khz * spin_ms));
    end.record(stream);
    blocking.record(stream);
    const auto t0 = Clock::now();
    blocking.synchronize();
    const double waited = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i >= 2) wakes.push_back(std::max(0.0, waited - static_cast<double>(elapsed_ms(begin, end))));
  }
  costs.wake_ms = median_of(wakes);

  // The host's side of one chunk: three copies, a launch, the event records and waits between them.
  std::vector<double> chunks;
  Event e1, e2, e3;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = Clock::now();
    for (int k = 0; k < 16; ++k) {
      other.wait(e3);
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(dev.data(), host.data(), 4, cudaMemcpyHostToDevice, other.get()));
      e1.record(other);
      stream.wait(e1);
      spin_for<<<1, 1, 0, stream.get()>>>(0);
      e2.record(stream);
      other.wait(e2);
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(host.data(), dev.data(), 4, cudaMemcpyDeviceToHost, other.get()));
      e3.record(other);
    }
    chunks.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / 16);
    stream.synchronize();
    other.synchronize();
  }
  costs.chunk_ms = median_of(chunks);

  // A job handed to the staging threads and waited for: what a stage-in or
  // a stage-out costs beyond its bytes (a thread woken, the piece handed
  // back). A small job, so its bytes cost next to nothing.
  {
    StagingPool pool;
    std::vector<char> from(64 << 10), to(64 << 10);
    std::vector<double> jobs;
    for (int i = 0; i < 30; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // the threads gone idle, as between chunks
      const auto t0 = Clock::now();
      pool.run(from.size(), from.size(), [&](std::size_t, std::size_t n) { std::memcpy(to.data(), from.data(), n); });
      if (i >= 5) jobs.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    costs.stage_ms = median_of(jobs);
  }

  // A run's own start and end, from the pipeline itself: one chunk of a
  // few bytes, whose copies and kernel cost next to nothing.
  {
    PinnedBuffer<float> in(16), out(16);
    PipelineOptions o;
    o.device = device;
    o.report_bound = true;  // the run is timed stage by stage: RunReport::overhead
    Pipeline p(o);
    const auto x = p.input(in.span());
    const auto y = p.output(out.span());
    p.compute([x, y](const Chunk& c) { copy_items<<<1, 32, 0, c.stream.get()>>>(c[x].data(), c[y].data(), c.size()); });
    std::vector<double> runs;
    for (int i = 0; i < 25; ++i) {
      const RunReport r = p.run();
      if (i >= 5) runs.push_back(r.overhead.start_ms + r.overhead.end_ms);
    }
    costs.run_ms = median_of(runs);
  }
  SLUICE_CUDA_CHECK(cudaGetLastError());
  return costs;
}

}  // namespace sluice
