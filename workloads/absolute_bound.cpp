#include "absolute_bound.hpp"

#include <algorithm>
#include <span>
#include <vector>

#include "bound/host_rates.hpp"
#include "bound/link_rates.hpp"
#include "bound/staging_rates.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/event.hpp"
#include "sluice/core/event_timer.hpp"
#include "sluice/core/stream.hpp"

namespace sluice::workloads {

namespace {
constexpr std::size_t piece_items = (std::size_t{16} << 20) / sizeof(float);
constexpr std::size_t ring_items = (std::size_t{256} << 20) / sizeof(float);
}  // namespace

double kernel_alone_ms(const Problem& p, int repeats) {
  const Workload& w = p.workload();
  const std::size_t arrays = w.input_count() + 1;
  std::size_t free_bytes = 0, total = 0;
  SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  // All the data on the device when it fits with room to spare; else a ring
  // that the pieces cycle through (the kernels' time does not depend on the values).
  const bool whole = arrays * p.items() * sizeof(float) < free_bytes / 2;
  const std::size_t resident = whole ? p.items() : std::min(p.items(), ring_items);
  Stream stream;
  std::vector<DeviceBuffer<float>> device;
  for (std::size_t a = 0; a < arrays; ++a) device.emplace_back(resident, stream);
  for (std::size_t a = 0; a + 1 < arrays; ++a)
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(device[a].data(), p.input(a).data(), resident * sizeof(float),
                                      cudaMemcpyHostToDevice, stream.get()));
  stream.synchronize();
  auto launch_on = [&](StreamView on, std::size_t begin, std::size_t n) {
    const std::size_t at = begin % resident;
    const float* inputs[2] = {device[0].data() + at, device[std::min<std::size_t>(1, arrays - 2)].data() + at};
    w.launch(on, inputs, device.back().data() + at, n);
  };
  auto launch = [&](std::size_t begin, std::size_t n) { launch_on(stream, begin, n); };
  auto fastest = [](const std::vector<double>& s) { return *std::min_element(s.begin(), s.end()); };
  double best = fastest(time_with_events(stream, 1, repeats, [&](StreamView) {
    for (std::size_t begin = 0; begin < p.items(); begin += piece_items)
      launch(begin, std::min(piece_items, p.items() - begin));
  }));
  if (whole) best = std::min(best, fastest(time_with_events(stream, 1, repeats, [&](StreamView) { launch(0, p.items()); })));
  // Pieces dealt over two streams, as a pipeline with two compute streams
  // runs them: kernels that overlap can fill the SMs better than one stream.
  Stream second;
  Event fork, join;
  best = std::min(best, fastest(time_with_events(stream, 1, repeats, [&](StreamView) {
    fork.record(stream);
    second.wait(fork);
    std::size_t k = 0;
    for (std::size_t begin = 0; begin < p.items(); begin += piece_items, ++k)
      launch_on(k % 2 ? StreamView(second) : StreamView(stream), begin, std::min(piece_items, p.items() - begin));
    join.record(second);
    stream.wait(join);
  })));
  return best;
}

RunVolume volume_of(const Problem& p, double kernel_ms, bool staged) {
  RunVolume v;
  const double array = static_cast<double>(p.items() * sizeof(float));
  v.h2d_bytes = array * static_cast<double>(p.workload().input_count());
  v.d2h_bytes = array;
  if (staged) {
    v.staged_in_bytes = v.h2d_bytes;
    v.staged_out_bytes = v.d2h_bytes;
  }
  v.kernel_ms = kernel_ms;
  return v;
}

AbsoluteBound absolute_bound(const Problem& p, int device, int repeats, StagingPool* host, Problem* pageable) {
  AbsoluteBound b;
  b.rates = with_link({}, refresh_link_rates(device));
  if (host) {
    // The host at its best: the staging threads with the link idle and while
    // it streams, over scratch memory and over the row's own arrays, the
    // fastest of all. A staged run's copy engines read the slots the threads
    // just wrote, often from cache, so no one condition is its condition;
    // the fastest is a bound no run can beat.
    HostCopyRates while_streaming = refresh_staging_rates(device, *host);
    HostCopyRates h = fastest_of(while_streaming, host_copy_rates(*host));
    if (pageable) {
      const std::span<const float> in = pageable->input(0);
      const std::span<float> out = pageable->output();
      const HostRegions own{reinterpret_cast<const std::byte*>(in.data()), in.size_bytes(),
                            reinterpret_cast<std::byte*>(out.data()), out.size_bytes()};
      while_streaming = fastest_of(while_streaming, measure_staging_rates(device, *host, own));
      h = fastest_of(h, fastest_of(while_streaming, measure_host_copy_rates(*host, own)));
    }
    b.rates = with_staging_beside_link(with_host(b.rates, h), while_streaming);
  }
  b.kernel_ms = kernel_alone_ms(p, repeats);
  b.pinned_volume = volume_of(p, b.kernel_ms, false);
  if (host) b.staged_volume = volume_of(p, b.kernel_ms, true);
  b.recompute(b.rates);
  return b;
}

void AbsoluteBound::recompute(const EngineRates& best) {
  rates = best;
  pinned = compute_bound(pinned_volume, rates);
  const bool staged_known = staged_volume.staged_in_bytes > 0 || staged_volume.staged_out_bytes > 0;
  staged = staged_known ? compute_bound(staged_volume, rates) : Bound{};
}

}  // namespace sluice::workloads
