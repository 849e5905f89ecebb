// cudaLaunchHostFunc tells the host, in stream order, that a batch is done -
// here, that its pinned input slot may take the next batch - without the host
// blocking on the stream. A data loader's prefetch, in miniature.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "demo.hpp"
#include "kernels.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/host_fn.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/measure/stats.hpp"

namespace sluice::demo {

namespace {
float value(std::size_t i) { return static_cast<float>(i % 4099) * 0.5f + 1.0f; }

// "Loading" a batch: the CPU work a loader does (decode, read, generate).
void load(float* slot, std::size_t first, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) slot[i] = value(first + i);
}

void enqueue_batch(Stream& s, const float* slot, DeviceBuffer<float>& dev, float* out, std::size_t n) {
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(dev.data(), slot, n * sizeof(float), cudaMemcpyHostToDevice, s.get()));
  launch_affine(s, dev.data(), dev.data(), n, 2.0f, 1.0f);
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(out, dev.data(), n * sizeof(float), cudaMemcpyDeviceToHost, s.get()));
}
}  // namespace

DemoResult run_callbacks(const DemoOptions& o) {
  const std::size_t batches = 16;
  const std::size_t per_batch = size_or(o, std::size_t{128} << 20) / sizeof(float) / batches;
  const std::size_t total = per_batch * batches;
  Stream stream;
  DemoResult r = make_result("callbacks", "how does the GPU tell the host a batch is done?", {"measurement", "ms"});

  std::vector<double> round_trip;
  for (int i = 0; i < 200; ++i) {
    std::atomic<bool> seen{false};
    const auto begin = std::chrono::steady_clock::now();
    enqueue_host(stream, [&seen] { seen.store(true, std::memory_order_release); });
    while (!seen.load(std::memory_order_acquire)) {}
    round_trip.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count());
  }
  stream.synchronize();
  const Summary trip = summarize(round_trip);

  PinnedBuffer<float> slots[2] = {PinnedBuffer<float>(per_batch), PinnedBuffer<float>(per_batch)};
  PinnedBuffer<float> out(total);
  DeviceBuffer<float> dev(per_batch, stream);
  auto verify = [&] {
    for (std::size_t i = 0; i < total; ++i)
      if (out[i] != value(i) * 2.0f + 1.0f) return false;
    return true;
  };

  // One batch at a time: load, enqueue, wait, repeat. The GPU idles while the host loads.
  std::fill(out.begin(), out.end(), -1.0f);
  auto begin = std::chrono::steady_clock::now();
  for (std::size_t b = 0; b < batches; ++b) {
    load(slots[0].data(), b * per_batch, per_batch);
    enqueue_batch(stream, slots[0].data(), dev, out.data() + b * per_batch, per_batch);
    stream.synchronize();
  }
  const double blocking_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  const bool blocking_ok = verify();

  // Two slots; a host function frees each as its batch finishes, and the host
  // loads the next batch into it while the GPU works on the other.
  std::fill(out.begin(), out.end(), -1.0f);
  std::mutex mutex;
  std::condition_variable freed;
  std::deque<std::size_t> done;
  begin = std::chrono::steady_clock::now();
  for (std::size_t b = 0; b < batches; ++b) {
    if (b >= 2) {
      std::unique_lock lock(mutex);
      freed.wait(lock, [&] { return !done.empty(); });
      done.pop_front();
    }
    float* slot = slots[b % 2].data();
    load(slot, b * per_batch, per_batch);
    enqueue_batch(stream, slot, dev, out.data() + b * per_batch, per_batch);
    enqueue_host(stream, [&, b] {
      {
        std::lock_guard lock(mutex);
        done.push_back(b);
      }
      freed.notify_one();
    });
  }
  stream.synchronize();
  const double callback_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  const bool callback_ok = verify();

  r.rows.push_back({"host function round trip, median", fixed(trip.median, 4)});
  r.rows.push_back({"host function round trip, p99", fixed(trip.p99, 4)});
  r.rows.push_back({fmt::format("{} batches, synchronize after each", batches), fixed(blocking_ms, 2)});
  r.rows.push_back({fmt::format("{} batches, host function frees the slot", batches), fixed(callback_ms, 2)});
  r.figures = {{"round_trip_median_ms", trip.median}, {"round_trip_p99_ms", trip.p99},
               {"blocking_ms", blocking_ms}, {"callback_ms", callback_ms}};
  r.verified = blocking_ok && callback_ok;
  r.verification = "every batch's output compared with 2 * input + 1, both loops";
  r.conclusion = fmt::format(
      "a host function came back in {:.1f} us (median); using it to free each input slot let loading overlap the GPU "
      "work: {:.2f} ms against {:.2f} ms when the host waited on the stream after every batch ({:.2f}x)",
      trip.median * 1e3, callback_ms, blocking_ms, blocking_ms / callback_ms);
  return r;
}

}  // namespace sluice::demo
