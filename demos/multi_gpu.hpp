#pragma once
// What the multi-GPU demos share: a compute and a communication stream per
// GPU, per-GPU step timing, and timelines with one lane per GPU per stream.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sluice/core/event.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/trace/trace.hpp"
#include "sluice/trace/trace_recorder.hpp"

namespace sluice::demo {

struct GpuStreams {
  int device = 0;
  Stream compute;
  // Peer copies and collectives, at the highest priority: their blocks are
  // scheduled ahead of the compute kernel's waiting ones, as DDP-style
  // trainers do, so communication is not starved by a GPU full of compute.
  Stream comm;
};

// Streams made on each device in turn (the caller's current device is kept).
std::vector<GpuStreams> make_gpu_streams(const std::vector<int>& devices);

// Waits for every GPU in `gpus` to be idle.
void synchronize_all(const std::vector<GpuStreams>& gpus);

// Times one step of work spread over the GPUs: `issue` enqueues it, starting
// after a start event on each compute stream, ending with each comm stream
// joined back into its compute stream. The step's time is the slowest GPU's,
// start to end, by events on each GPU (events cannot be compared across GPUs).
double timed_step(std::vector<GpuStreams>& gpus, const std::function<void()>& issue);
// The median of `repeats` such steps.
double median_step(std::vector<GpuStreams>& gpus, int repeats, const std::function<void()>& issue);

// One recorder per GPU, each with its own time zero, started back to back
// once every GPU is idle, so the GPUs' timelines line up to within the few
// microseconds it takes to record the origins.
class MultiGpuRecorder {
 public:
  explicit MultiGpuRecorder(std::vector<GpuStreams>& gpus);
  TraceRecorder& on(std::size_t gpu) { return *recorders_[gpu]; }
  // Waits for the work and returns every interval, each marked with its GPU.
  Trace trace(std::string title) const;

 private:
  std::vector<int> devices_;
  std::vector<std::unique_ptr<TraceRecorder>> recorders_;
};

}  // namespace sluice::demo
