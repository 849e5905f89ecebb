// H2D and D2H at once, or one after the other? With two or more copy engines
// (asyncEngineCount) the two directions run together; with one they take turns.
#include <fmt/format.h>

#include <cstring>

#include "demo.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/event.hpp"
#include "sluice/core/event_timer.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/measure/stats.hpp"

namespace sluice::demo {

DemoResult run_copy_engines(const DemoOptions& o) {
  const std::size_t bytes = size_or(o, std::size_t{256} << 20);
  const int repeats = repeats_or(o, 5);
  const DeviceInfo info = Device(o.device).info();
  Stream up, down;
  PinnedBuffer<unsigned char> host_in(bytes), host_out(bytes);
  for (std::size_t i = 0; i < bytes; ++i) host_in[i] = static_cast<unsigned char>(i * 13 + 1);
  DeviceBuffer<unsigned char> dev_in(bytes, up), dev_out(bytes, up);
  // dev_out holds known data so the D2H result can be checked.
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(dev_out.data(), host_in.data(), bytes, cudaMemcpyHostToDevice, up.get()));
  up.synchronize();

  auto h2d = [&](StreamView s) {
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(dev_in.data(), host_in.data(), bytes, cudaMemcpyHostToDevice, s.get()));
  };
  auto d2h = [&](StreamView s) {
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(host_out.data(), dev_out.data(), bytes, cudaMemcpyDeviceToHost, s.get()));
  };
  const double one_after_other = summarize(time_with_events(up, 1, repeats, [&](StreamView s) { h2d(s); d2h(s); })).median;
  Event fork, join;
  const double together = summarize(time_with_events(up, 1, repeats, [&](StreamView s) {
                            fork.record(s);
                            down.wait(fork);
                            h2d(s);
                            d2h(down);
                            join.record(down);
                            s.wait(join);
                          })).median;
  std::vector<unsigned char> check(bytes);
  SLUICE_CUDA_CHECK(cudaMemcpy(check.data(), dev_in.data(), bytes, cudaMemcpyDeviceToHost));
  const bool ok = std::memcmp(check.data(), host_in.data(), bytes) == 0 &&
                  std::memcmp(host_out.data(), host_in.data(), bytes) == 0;

  const double moved = 2.0 * static_cast<double>(bytes);
  DemoResult r = make_result("copy-engines", "do H2D and D2H run at the same time?", {"schedule", "ms", "GB/s (both directions)"});
  r.rows.push_back({"H2D then D2H, one stream", fixed(one_after_other, 2), fixed(gb_per_s(moved, one_after_other), 1)});
  r.rows.push_back({"H2D and D2H at once, two streams", fixed(together, 2), fixed(gb_per_s(moved, together), 1)});
  r.figures = {{"sequential_ms", one_after_other}, {"together_ms", together},
               {"async_engine_count", info.async_engine_count}};
  r.verified = ok;
  r.verification = "the uploaded and downloaded bytes compared with the source";
  const double gain = one_after_other / together;
  r.conclusion = fmt::format(
      "at once took {:.2f} ms against {:.2f} ms one after the other ({:.2f}x); this GPU reports {} copy engine{}, {}",
      together, one_after_other, gain, info.async_engine_count, info.async_engine_count == 1 ? "" : "s",
      gain > 1.3 ? "so the two directions really overlap"
                 : "yet the directions did not overlap much here: the shared link or host memory is the limit");
  return r;
}

}  // namespace sluice::demo
