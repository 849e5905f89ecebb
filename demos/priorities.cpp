// Urgent work behind a full GPU: short kernels launched while long
// low-priority kernels keep every SM busy. A high-priority stream lets their
// blocks go first as soon as any SM frees up; without it they wait their turn.
#include <fmt/format.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "demo.hpp"
#include "kernels.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/event.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/measure/stats.hpp"

namespace sluice::demo {

namespace {
struct Latencies {
  Summary ms;
  bool all_done = false;
};

Latencies measure(Stream& background, Stream& urgent, unsigned fill_blocks, int samples) {
  DeviceBuffer<int> done(static_cast<std::size_t>(samples), urgent);
  SLUICE_CUDA_CHECK(cudaMemsetAsync(done.data(), 0, done.bytes(), urgent.get()));
  urgent.synchronize();
  Event before(Event::Timing::enabled), after(Event::Timing::enabled);
  std::vector<double> latency;
  // Each fill kernel: many waves of 1024-thread blocks spinning 100 us.
  auto fill = [&] { launch_sleep(background, 100'000, nullptr, nullptr, nullptr, fill_blocks, 1024); };
  for (int i = 0; i < 3; ++i) fill();
  for (int i = 0; i < samples; ++i) {
    fill();  // keep the queue of background work deep
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    before.record(urgent);
    launch_sleep(urgent, 10'000, nullptr, nullptr, done.data() + i);  // a 10 us urgent kernel
    after.record(urgent);
    after.synchronize();
    latency.push_back(elapsed_ms(before, after));
  }
  background.synchronize();
  std::vector<int> flags(static_cast<std::size_t>(samples));
  SLUICE_CUDA_CHECK(cudaMemcpy(flags.data(), done.data(), done.bytes(), cudaMemcpyDeviceToHost));
  return {summarize(latency), std::all_of(flags.begin(), flags.end(), [](int f) { return f == 1; })};
}
}  // namespace

DemoResult run_priorities(const DemoOptions& o) {
  const int samples = 20 * repeats_or(o, 2);
  const DeviceInfo info = Device(o.device).info();
  const unsigned fill_blocks = static_cast<unsigned>(info.sm_count) * 2 * 16;  // ~16 waves
  Stream background(info.least_stream_priority);
  Stream urgent_high(info.greatest_stream_priority);
  Stream urgent_same(info.least_stream_priority);
  DemoResult r = make_result("priorities", "can urgent kernels jump the queue of a busy GPU?",
               {"urgent stream priority", "samples", "median ms", "p90 ms", "p99 ms", "max ms"});
  measure(background, urgent_high, fill_blocks, 2);  // warm-up
  const Latencies same = measure(background, urgent_same, fill_blocks, samples);
  const Latencies high = measure(background, urgent_high, fill_blocks, samples);
  auto row = [&](const std::string& what, const Latencies& l) {
    r.rows.push_back({what, std::to_string(samples), fixed(l.ms.median, 3), fixed(l.ms.p90, 3), fixed(l.ms.p99, 3),
                      fixed(l.ms.max, 3)});
  };
  row(fmt::format("{} (same as background)", info.least_stream_priority), same);
  row(fmt::format("{} (highest)", info.greatest_stream_priority), high);
  r.figures = {{"same_median_ms", same.ms.median}, {"same_p99_ms", same.ms.p99},
               {"high_median_ms", high.ms.median}, {"high_p99_ms", high.ms.p99}};
  r.verified = same.all_done && high.all_done;
  r.verification = "every urgent kernel set its done flag; latency is event to event in the urgent stream";
  r.conclusion = fmt::format(
      "behind a full GPU, a 10 us kernel at equal priority took {:.3f} ms (median; p99 {:.3f}), at the highest "
      "priority {:.3f} ms (p99 {:.3f}): {}",
      same.ms.median, same.ms.p99, high.ms.median, high.ms.p99,
      high.ms.median < same.ms.median
          ? fmt::format("priority cut the median latency {:.1f}x", same.ms.median / high.ms.median)
          : std::string("priority did not help here"));
  return r;
}

}  // namespace sluice::demo
