// Small kernels in one stream run one after another; in separate streams
// they can share the GPU. How many run at once here?
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "demo.hpp"
#include "kernels.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/stream.hpp"

namespace sluice::demo {

namespace {
struct Outcome {
  double wall_ms = 0;
  int most_at_once = 0;
  bool all_done = false;
};

// `kernels` one-block kernels of `ns` each, spread over `streams` streams.
Outcome launch_sleepers(int kernels, int streams, std::uint64_t ns) {
  std::vector<Stream> pool(static_cast<std::size_t>(streams));
  DeviceBuffer<std::uint64_t> starts(static_cast<std::size_t>(kernels), pool[0]), ends(static_cast<std::size_t>(kernels), pool[0]);
  DeviceBuffer<int> done(static_cast<std::size_t>(kernels), pool[0]);
  SLUICE_CUDA_CHECK(cudaMemsetAsync(done.data(), 0, done.bytes(), pool[0].get()));
  pool[0].synchronize();
  const auto begin = std::chrono::steady_clock::now();
  for (int k = 0; k < kernels; ++k)
    launch_sleep(pool[static_cast<std::size_t>(k % streams)], ns, starts.data() + k, ends.data() + k, done.data() + k);
  for (auto& s : pool) s.synchronize();
  Outcome out;
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  std::vector<std::uint64_t> s(static_cast<std::size_t>(kernels)), e(static_cast<std::size_t>(kernels));
  std::vector<int> d(static_cast<std::size_t>(kernels));
  SLUICE_CUDA_CHECK(cudaMemcpy(s.data(), starts.data(), starts.bytes(), cudaMemcpyDeviceToHost));
  SLUICE_CUDA_CHECK(cudaMemcpy(e.data(), ends.data(), ends.bytes(), cudaMemcpyDeviceToHost));
  SLUICE_CUDA_CHECK(cudaMemcpy(d.data(), done.data(), done.bytes(), cudaMemcpyDeviceToHost));
  out.all_done = std::all_of(d.begin(), d.end(), [](int v) { return v == 1; });
  for (int k = 0; k < kernels; ++k) {  // kernels running when kernel k started
    int running = 0;
    for (int j = 0; j < kernels; ++j) running += s[static_cast<std::size_t>(j)] <= s[static_cast<std::size_t>(k)] &&
                                                 e[static_cast<std::size_t>(j)] > s[static_cast<std::size_t>(k)];
    out.most_at_once = std::max(out.most_at_once, running);
  }
  return out;
}
}  // namespace

DemoResult run_concurrent_kernels(const DemoOptions& o) {
  const int kernels = 32;
  const std::uint64_t ns = 2'000'000 * static_cast<std::uint64_t>(repeats_or(o, 1));  // 2 ms each
  const DeviceInfo info = Device(o.device).info();
  DemoResult r = make_result("concurrent-kernels", "how many small kernels run at once?",
               {"streams", "kernels", "wall ms", "most running at once"});
  launch_sleepers(4, 4, 1000);  // warm-up: module load, stream creation
  const Outcome one = launch_sleepers(kernels, 1, ns);
  const Outcome many = launch_sleepers(kernels, kernels, ns);
  r.rows.push_back({"1", std::to_string(kernels), fixed(one.wall_ms, 2), std::to_string(one.most_at_once)});
  r.rows.push_back({std::to_string(kernels), std::to_string(kernels), fixed(many.wall_ms, 2), std::to_string(many.most_at_once)});
  r.figures = {{"one_stream_ms", one.wall_ms}, {"many_streams_ms", many.wall_ms},
               {"most_at_once", many.most_at_once}, {"sm_count", info.sm_count}};
  r.verified = one.all_done && many.all_done;
  r.verification = "every kernel set its done flag and recorded its start and end on the GPU's global timer";
  r.conclusion = fmt::format(
      "{} one-block kernels of {:.0f} ms took {:.1f} ms in one stream (at most {} at once) and {:.1f} ms in {} streams "
      "(up to {} at once): {:.1f}x; this GPU reports concurrent kernels {} and {} SMs",
      kernels, static_cast<double>(ns) / 1e6, one.wall_ms, one.most_at_once, many.wall_ms, kernels, many.most_at_once,
      one.wall_ms / many.wall_ms, info.concurrent_kernels ? "supported" : "not supported", info.sm_count);
  return r;
}

}  // namespace sluice::demo
