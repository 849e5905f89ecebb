// Data-parallel gradient all-reduce, overlapped with the backward pass: each
// bucket of gradients is all-reduced on a communication stream the moment
// backward has produced its last gradient (an event), against one all-reduce
// after the whole backward. One thread drives every GPU (ncclCommInitAll).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "demo.hpp"
#include "model_kernels.hpp"
#include "multi_gpu.hpp"
#include "nccl_runtime.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/multigpu/multi_gpu_plans.hpp"

namespace sluice::demo {

namespace {
constexpr const char* kName = "nccl-overlap";
constexpr const char* kQuestion = "can the gradient all-reduce hide behind the backward pass?";
}  // namespace

#ifndef SLUICE_HAVE_NCCL_HEADER
DemoResult run_nccl_overlap(const DemoOptions&) { return skipped_result(kName, kQuestion, nccl_unavailable_reason()); }
#else
namespace {

struct Model {
  int layers = 24;
  std::size_t per_layer = 0;  // gradient floats per layer
  std::vector<Bucket> buckets;
};

class Step {
 public:
  Step(const NcclApi& nccl, const Model& model, std::vector<GpuStreams>& gpus)
      : nccl_(nccl), model_(model), gpus_(gpus), comms_(nccl, devices(gpus)) {
    for (auto& g : gpus_) {
      DeviceScope scope(g.device);
      grads_.emplace_back(model_.per_layer * model_.layers, g.compute);
      ready_.emplace_back(model_.buckets.size());
    }
  }

  ~Step() {
    for (std::size_t g = 0; g < gpus_.size(); ++g) {
      DeviceScope scope(gpus_[g].device);
      grads_[g] = {};
      ready_[g].clear();
    }
  }
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

  // Layer j of the backward pass (the (L-1-j)-th layer of the model) writes
  // its gradient at offset j, so that buckets are contiguous.
  void backward(std::uint32_t iterations, MultiGpuRecorder* rec = nullptr) {
    for (int j = 0; j < model_.layers; ++j) backward_layer(j, iterations, rec);
  }

  void backward_layer(int j, std::uint32_t iterations, MultiGpuRecorder* rec) {
    for (std::size_t g = 0; g < gpus_.size(); ++g) {
      DeviceScope scope(gpus_[g].device);
      auto launch = [&] {
        launch_costly_gradient(gpus_[g].compute, grads_[g].data() + j * model_.per_layer, model_.per_layer,
                               static_cast<int>(g), model_.layers - 1 - j, iterations);
      };
      if (rec) rec->on(g).record(gpus_[g].compute, Lane::compute, j, model_.per_layer * 4, 0, launch);
      else launch();
    }
  }

  // All-reduces gradients [first, first + count) layers on each GPU's `on` stream.
  void all_reduce(std::size_t first_layer, std::size_t layers, bool on_comm, std::size_t label, MultiGpuRecorder* rec) {
    std::vector<std::size_t> marks;
    for (std::size_t g = 0; g < gpus_.size() && rec; ++g) {
      DeviceScope scope(gpus_[g].device);
      marks.push_back(rec->on(g).start(stream(g, on_comm), Lane::peer, label, layers * model_.per_layer * 4, 0));
    }
    nccl_check(nccl_, nccl_.group_start(), "ncclGroupStart");
    for (std::size_t g = 0; g < gpus_.size(); ++g) {
      float* data = grads_[g].data() + first_layer * model_.per_layer;
      nccl_check(nccl_, nccl_.all_reduce(data, data, layers * model_.per_layer, ncclFloat32, ncclSum, comms_[g],
                                         stream(g, on_comm).get()),
                 "ncclAllReduce");
    }
    nccl_check(nccl_, nccl_.group_end(), "ncclGroupEnd");
    for (std::size_t g = 0; g < gpus_.size() && rec; ++g) {
      DeviceScope scope(gpus_[g].device);
      rec->on(g).stop(marks[g], stream(g, on_comm));
    }
  }

  // Backward, then one all-reduce of every gradient on the compute stream.
  void sequential(std::uint32_t iterations, MultiGpuRecorder* rec = nullptr) {
    backward(iterations, rec);
    all_reduce(0, model_.layers, false, 0, rec);
  }

  // The buckets' all-reduces alone, one after another on the comm streams.
  void buckets_alone() {
    for (std::size_t b = 0; b < model_.buckets.size(); ++b)
      all_reduce(model_.buckets[b].first, model_.buckets[b].count, true, b, nullptr);
  }

  // Each bucket's all-reduce starts on the comm stream once backward has
  // produced its last gradient.
  void overlapped(std::uint32_t iterations, MultiGpuRecorder* rec = nullptr) {
    std::size_t next_bucket = 0;
    for (int j = 0; j < model_.layers; ++j) {
      backward_layer(j, iterations, rec);
      const Bucket& b = model_.buckets[next_bucket];
      if (static_cast<std::size_t>(j) + 1 != b.first + b.count) continue;
      for (std::size_t g = 0; g < gpus_.size(); ++g) {
        DeviceScope scope(gpus_[g].device);
        ready_[g][next_bucket].record(gpus_[g].compute);
        gpus_[g].comm.wait(ready_[g][next_bucket]);
      }
      all_reduce(b.first, b.count, true, next_bucket, rec);
      ++next_bucket;
    }
  }

  void poison() {
    for (std::size_t g = 0; g < gpus_.size(); ++g) {
      DeviceScope scope(gpus_[g].device);
      SLUICE_CUDA_CHECK(cudaMemsetAsync(grads_[g].data(), 0xFF, grads_[g].bytes(), gpus_[g].compute.get()));
    }
  }

  // Every GPU holds, for every element, the sum over GPUs of what each produced.
  std::string verify() {
    std::vector<float> host(grads_[0].size());
    for (std::size_t g = 0; g < gpus_.size(); ++g) {
      DeviceScope scope(gpus_[g].device);
      SLUICE_CUDA_CHECK(cudaMemcpy(host.data(), grads_[g].data(), grads_[g].bytes(), cudaMemcpyDeviceToHost));
      for (int j = 0; j < model_.layers; ++j)
        for (std::size_t i = 0; i < model_.per_layer; ++i) {
          float expected = 0;
          for (std::size_t r = 0; r < gpus_.size(); ++r)
            expected += gradient_value(static_cast<int>(r), model_.layers - 1 - j, i);
          const float got = host[j * model_.per_layer + i];
          if (got != expected)
            return fmt::format("GPU{} gradient of layer {} element {}: {} (expected {})", gpus_[g].device,
                               model_.layers - 1 - j, i, got, expected);
        }
    }
    return {};
  }

 private:
  static std::vector<int> devices(const std::vector<GpuStreams>& gpus) {
    std::vector<int> d;
    for (const auto& g : gpus) d.push_back(g.device);
    return d;
  }
  StreamView stream(std::size_t g, bool on_comm) const { return on_comm ? gpus_[g].comm : gpus_[g].compute; }

  const NcclApi& nccl_;
  const Model& model_;
  std::vector<GpuStreams>& gpus_;
  NcclComms comms_;
  std::vector<DeviceBuffer<float>> grads_;
  std::vector<std::vector<Event>> ready_;
};

}  // namespace

DemoResult run_nccl_overlap(const DemoOptions& o) {
  if (const auto why = nccl_unavailable_reason(); !why.empty()) return skipped_result(kName, kQuestion, why);
  std::string why;
  const NcclApi& nccl = *load_nccl(why);
  std::vector<int> devices(static_cast<std::size_t>(Device::count()));
  std::iota(devices.begin(), devices.end(), 0);
  auto gpus = make_gpu_streams(devices);

  Model model;
  const std::size_t gradient_bytes = size_or(o, std::size_t{256} << 20);
  model.per_layer = std::max<std::size_t>(gradient_bytes / sizeof(float) / model.layers, 1024);
  const std::size_t bucket_bytes = std::size_t{25} << 20;  // PyTorch DDP's default bucket
  model.buckets = plan_buckets(std::vector<std::size_t>(model.layers, model.per_layer * sizeof(float)), bucket_bytes);
  const int repeats = repeats_or(o, 5);
  Step step(nccl, model, gpus);

  // Warm up NCCL's connections, then time communication alone.
  for (int k = 0; k < 2; ++k) timed_step(gpus, [&] { step.buckets_alone(); });
  const double comm_ms = median_step(gpus, repeats, [&] { step.buckets_alone(); });
  const double one_reduce_ms = median_step(gpus, repeats, [&] { step.all_reduce(0, model.layers, false, 0, nullptr); });

  // Layers whose backward totals about 1.25x the communication: the case
  // where all of it could hide.
  // Backward's time is a fixed part (writing the gradients) plus a part
  // proportional to the iterations: two probes give both.
  const std::uint32_t low = 64, high = 1024;
  const double low_ms = median_step(gpus, 2, [&] { step.backward(low); });
  const double high_ms = median_step(gpus, 2, [&] { step.backward(high); });
  const double per_iteration = std::max((high_ms - low_ms) / (high - low), 1e-9);
  const auto iterations = static_cast<std::uint32_t>(
      std::clamp(low + (1.25 * comm_ms - low_ms) / per_iteration, 1.0, 1e7));
  const double backward_ms = median_step(gpus, repeats, [&] { step.backward(iterations); });
  const double sequential_ms = median_step(gpus, repeats, [&] { step.sequential(iterations); });
  const double overlapped_ms = median_step(gpus, repeats, [&] { step.overlapped(iterations); });

  step.poison();
  timed_step(gpus, [&] { step.overlapped(iterations); });
  const std::string overlapped_error = step.verify();
  step.poison();
  timed_step(gpus, [&] { step.sequential(iterations); });
  const std::string sequential_error = step.verify();

  DemoResult r = make_result(kName, kQuestion, {"step", "ms", "note"});
  const double hidden = (backward_ms + comm_ms - overlapped_ms) / comm_ms;
  const double last_bucket_share =
      static_cast<double>(model.buckets.back().count) / static_cast<double>(model.layers);
  r.rows = {
      {"backward alone", fixed(backward_ms, 3), fmt::format("{} layers, {} GPUs", model.layers, gpus.size())},
      {"bucketed all-reduces alone", fixed(comm_ms, 3),
       fmt::format("{} buckets of <= {} MiB", model.buckets.size(), (model.buckets.front().bytes >> 20))},
      {"one all-reduce alone", fixed(one_reduce_ms, 3),
       fmt::format("{} MiB per GPU", model.layers * model.per_layer * 4 >> 20)},
      {"backward, then one all-reduce", fixed(sequential_ms, 3), "communication after compute"},
      {"backward with bucketed all-reduce", fixed(overlapped_ms, 3), "each bucket starts at its event"},
      {"communication hidden", fixed(100 * hidden, 1) + " %",
       fmt::format("(backward + comm - overlapped) / comm; the last bucket ({:.0f} %) cannot hide",
                   100 * last_bucket_share)},
  };
  r.figures = {{"backward_ms", backward_ms},     {"comm_ms", comm_ms},           {"one_reduce_ms", one_reduce_ms},
               {"sequential_ms", sequential_ms}, {"overlapped_ms", overlapped_ms}, {"hidden_fraction", hidden},
               {"gpus", static_cast<double>(gpus.size())}, {"nccl_version", static_cast<double>(nccl.version)}};

  MultiGpuRecorder seq_rec(gpus);
  step.sequential(iterations, &seq_rec);
  r.traces.push_back(seq_rec.trace("nccl-overlap: backward, then all-reduce"));
  MultiGpuRecorder ovl_rec(gpus);
  step.overlapped(iterations, &ovl_rec);
  r.traces.push_back(ovl_rec.trace("nccl-overlap: bucketed all-reduce during backward"));

  r.verified = overlapped_error.empty() && sequential_error.empty();
  r.verification = r.verified ? fmt::format("every gradient element on all {} GPUs equals the exact sum over GPUs, "
                                            "both ways (gradients poisoned first)",
                                            gpus.size())
                              : (overlapped_error.empty() ? "sequential: " + sequential_error
                                                          : "overlapped: " + overlapped_error);
  r.conclusion = fmt::format(
      "with backward ({:.2f} ms) {} communication ({:.2f} ms), starting each bucket's all-reduce at "
      "its event hid {:.0f} % of it: a step of {:.2f} ms instead of {:.2f} ms ({:.2f}x). What stays exposed is the "
      "last bucket, which cannot start before backward ends, and the SMs the all-reduce takes from backward",
      backward_ms, backward_ms >= comm_ms ? "at least as long as" : "shorter than", comm_ms, 100 * hidden,
      overlapped_ms, sequential_ms, sequential_ms / overlapped_ms);
  return r;
}
#endif

}  // namespace sluice::demo
