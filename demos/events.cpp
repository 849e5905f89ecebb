// Events as timers, and as dependencies between streams.
// Timing: a host clock around an asynchronous launch measures only the launch;
// events measure the work. Dependencies: a consumer stream that does not wait
// for the producer's event reads data that is not there yet.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "demo.hpp"
#include "kernels.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/event.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"

namespace sluice::demo {

namespace {
double host_ms_since(std::chrono::steady_clock::time_point begin) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
}

// Producer on `a` fills with 7 after a delay; consumer on `b` copies it out.
// Returns how many elements the consumer saw as 7.
std::size_t produce_consume(Stream& a, Stream& b, DeviceBuffer<int>& data, DeviceBuffer<int>& seen,
                            PinnedBuffer<int>& host, bool wait_for_producer) {
  const std::size_t n = data.size();
  SLUICE_CUDA_CHECK(cudaMemsetAsync(data.data(), 0, data.bytes(), a.get()));
  a.synchronize();
  Event produced;
  launch_delayed_fill(a, 20'000'000, data.data(), n, 7);  // 20 ms, then write
  produced.record(a);
  if (wait_for_producer) b.wait(produced);
  launch_copy_ints(b, data.data(), seen.data(), n);
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(host.data(), seen.data(), seen.bytes(), cudaMemcpyDeviceToHost, b.get()));
  b.synchronize();
  a.synchronize();
  return static_cast<std::size_t>(std::count(host.begin(), host.end(), 7));
}
}  // namespace

DemoResult run_events(const DemoOptions& o) {
  const std::size_t n = size_or(o, std::size_t{4} << 20) / sizeof(int);
  const std::uint64_t work_ns = 5'000'000;  // a 5 ms kernel
  Stream a, b;
  DemoResult r = make_result("events", "how do you time GPU work, and order it across streams?", {"measurement", "ms"});

  auto begin = std::chrono::steady_clock::now();
  launch_sleep(a, work_ns, nullptr, nullptr, nullptr);
  const double host_no_sync = host_ms_since(begin);
  a.synchronize();

  begin = std::chrono::steady_clock::now();
  launch_sleep(a, work_ns, nullptr, nullptr, nullptr);
  a.synchronize();
  const double host_sync = host_ms_since(begin);

  Event start(Event::Timing::enabled), stop(Event::Timing::enabled);
  start.record(a);
  launch_sleep(a, work_ns, nullptr, nullptr, nullptr);
  stop.record(a);
  stop.synchronize();
  const double by_events = elapsed_ms(start, stop);
  r.rows.push_back({"a 5 ms kernel, host clock, no synchronize", fixed(host_no_sync, 3)});
  r.rows.push_back({"a 5 ms kernel, host clock after synchronize", fixed(host_sync, 3)});
  r.rows.push_back({"a 5 ms kernel, events in its stream", fixed(by_events, 3)});

  DeviceBuffer<int> data(n, a), seen(n, a);
  PinnedBuffer<int> host(n);
  // A kernel's first launch loads its module (lazy loading), which waits for
  // the device and would order producer and consumer by accident: load both first.
  launch_delayed_fill(b, 0, seen.data(), 1, 0);
  launch_copy_ints(b, seen.data(), seen.data() + 1, 1);
  b.synchronize();
  const std::size_t without_wait = produce_consume(a, b, data, seen, host, false);
  const std::size_t with_wait = produce_consume(a, b, data, seen, host, true);
  r.rows.push_back({"consumer saw the producer's data, no wait (elements)", std::to_string(without_wait)});
  r.rows.push_back({"consumer saw the producer's data, cudaStreamWaitEvent (elements)", std::to_string(with_wait)});
  r.figures = {{"host_no_sync_ms", host_no_sync}, {"host_sync_ms", host_sync}, {"events_ms", by_events},
               {"elements_without_wait", static_cast<double>(without_wait)},
               {"elements_with_wait", static_cast<double>(with_wait)}};

  r.verified = with_wait == n && by_events >= 4.9;
  r.verification = fmt::format("with the wait, {} of {} elements arrived; the event-timed kernel took >= its 5 ms spin",
                               with_wait, n);
  const std::string race = without_wait < n
                               ? fmt::format("without it the consumer read {} stale elements of {}", n - without_wait, n)
                               : "without it the race did not show this time (the result was right by luck)";
  r.conclusion = fmt::format(
      "the host clock without synchronising saw {:.3f} ms of a {:.2f} ms kernel (only the launch); events saw {:.2f} "
      "ms. cudaStreamWaitEvent made the consumer wait for all {} elements; {}",
      host_no_sync, by_events, by_events, n, race);
  return r;
}

}  // namespace sluice::demo
