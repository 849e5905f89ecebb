#include "multi_gpu.hpp"

#include <algorithm>

#include "sluice/core/device.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/measure/stats.hpp"

namespace sluice::demo {

std::vector<GpuStreams> make_gpu_streams(const std::vector<int>& devices) {
  std::vector<GpuStreams> gpus;
  gpus.reserve(devices.size());
  for (int d : devices) {
    const int highest = Device(d).info().greatest_stream_priority;
    DeviceScope scope(d);
    gpus.push_back({d, Stream(), Stream(highest)});
  }
  return gpus;
}

void synchronize_all(const std::vector<GpuStreams>& gpus) {
  for (const auto& g : gpus) {
    g.compute.synchronize();
    g.comm.synchronize();
  }
}

double timed_step(std::vector<GpuStreams>& gpus, const std::function<void()>& issue) {
  synchronize_all(gpus);
  std::vector<Event> start, joined, stop;
  for (auto& g : gpus) {
    DeviceScope scope(g.device);
    start.emplace_back(Event::Timing::enabled).record(g.compute);
    g.comm.wait(start.back());
  }
  issue();
  for (auto& g : gpus) {
    DeviceScope scope(g.device);
    joined.emplace_back().record(g.comm);
    g.compute.wait(joined.back());
    stop.emplace_back(Event::Timing::enabled).record(g.compute);
  }
  double slowest = 0;
  for (std::size_t k = 0; k < gpus.size(); ++k) {
    stop[k].synchronize();
    slowest = std::max<double>(slowest, elapsed_ms(start[k], stop[k]));
  }
  return slowest;
}

double median_step(std::vector<GpuStreams>& gpus, int repeats, const std::function<void()>& issue) {
  std::vector<double> ms;
  for (int k = 0; k < repeats; ++k) ms.push_back(timed_step(gpus, issue));
  return summarize(ms).median;
}

MultiGpuRecorder::MultiGpuRecorder(std::vector<GpuStreams>& gpus) {
  synchronize_all(gpus);
  for (auto& g : gpus) {
    DeviceScope scope(g.device);
    devices_.push_back(g.device);
    recorders_.push_back(std::make_unique<TraceRecorder>(g.compute));
  }
}

Trace MultiGpuRecorder::trace(std::string title) const {
  Trace t;
  t.title = std::move(title);
  for (std::size_t k = 0; k < recorders_.size(); ++k)
    for (auto interval : recorders_[k]->intervals()) {
      interval.device = devices_[k];
      t.intervals.push_back(interval);
    }
  for (const auto& i : t.intervals) t.wall_ms = std::max(t.wall_ms, i.end_ms);
  return t;
}

}  // namespace sluice::demo
