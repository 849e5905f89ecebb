// A model split across GPUs, one stage per GPU, fed micro-batches on the
// GPipe and the 1F1B schedules: activations go forward and gradients back by
// peer copies on each GPU's communication stream, ordered by events, so that
// every stage computes while the others do. The bubble (idle share of the
// stages' time) is measured beside the textbook (S-1)/(M+S-1), and the result
// checked bit for bit against the same model run on one GPU.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <vector>

#include "demo.hpp"
#include "model_kernels.hpp"
#include "multi_gpu.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/error.hpp"
#include "sluice/measure/stats.hpp"
#include "sluice/multigpu/multi_gpu_plans.hpp"

namespace sluice::demo {

namespace {

constexpr const char* kName = "pipeline-parallel";
constexpr const char* kQuestion = "do micro-batches keep every stage of a model split across GPUs busy?";

// Stage s: forward y = a_s x + c_s; backward g_in = a_s g_out + 1/1024 x (it
// reads the activation the forward kept). The last stage's g_out is its y.
float scale_of(std::size_t s) { return 0.5f + 0.125f * static_cast<float>(s); }
float offset_of(std::size_t s) { return 0.25f * static_cast<float>(s + 1); }
constexpr float kStash = 1.0f / 1024;

struct Costs {
  std::uint32_t forward = 1, backward = 1;  // iterations
};

// One stage's buffers on its GPU, per micro-batch: its input activation, its
// output, the gradient it receives from the next stage and the one it sends back.
struct StageBuffers {
  std::vector<DeviceBuffer<float>> in, out, grad_out, grad_in;
  std::vector<Event> forward_sent, backward_sent;
  std::optional<Event> done;  // the stage's last step, for GPU 0 to wait on; made with its GPU current
  std::vector<Event> start, stop;  // timing of each kernel, in issue order
};

class SplitModel {
 public:
  SplitModel(std::vector<GpuStreams>& gpus, std::size_t micros, std::size_t items)
      : gpus_(gpus), micros_(micros), items_(items), stages_(gpus.size()) {
    for (std::size_t s = 0; s < stages_.size(); ++s) {
      DeviceScope scope(gpus_[s].device);
      auto& b = stages_[s];
      for (std::size_t m = 0; m < micros; ++m) {
        for (auto* v : {&b.in, &b.out, &b.grad_out, &b.grad_in}) v->emplace_back(items, gpus_[s].compute);
        b.forward_sent.emplace_back();
        b.backward_sent.emplace_back();
      }
      b.done.emplace();
    }
  }

  // Each GPU's memory is given back with that GPU current.
  ~SplitModel() {
    for (std::size_t s = 0; s < stages_.size(); ++s) {
      DeviceScope scope(gpus_[s].device);
      stages_[s] = StageBuffers{};
    }
  }
  SplitModel(const SplitModel&) = delete;
  SplitModel& operator=(const SplitModel&) = delete;

  // The micro-batches' inputs, on stage 0.
  void load(const std::vector<float>& input) {
    DeviceScope scope(gpus_[0].device);
    for (std::size_t m = 0; m < micros_; ++m)
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(stages_[0].in[m].data(), input.data() + m * items_, items_ * sizeof(float),
                                        cudaMemcpyHostToDevice, gpus_[0].compute.get()));
    gpus_[0].compute.synchronize();
  }

  void poison() {
    for (std::size_t s = 0; s < stages_.size(); ++s) {
      DeviceScope scope(gpus_[s].device);
      for (std::size_t m = 0; m < micros_; ++m) {
        SLUICE_CUDA_CHECK(cudaMemsetAsync(stages_[s].out[m].data(), 0xFF, items_ * 4, gpus_[s].compute.get()));
        SLUICE_CUDA_CHECK(cudaMemsetAsync(stages_[s].grad_in[m].data(), 0xFF, items_ * 4, gpus_[s].compute.get()));
      }
    }
    synchronize_all(gpus_);
  }

  // Enqueues one training step on `order`; returns the makespan (ms, by
  // events on GPU 0) and fills each stage's busy time.
  double step(const std::vector<ScheduledStep>& order, Costs costs, std::vector<double>& busy_ms,
              MultiGpuRecorder* rec = nullptr) {
    synchronize_all(gpus_);
    Event begin(Event::Timing::enabled), end(Event::Timing::enabled);
    {
      DeviceScope scope(gpus_[0].device);
      begin.record(gpus_[0].compute);
    }
    for (std::size_t s = 0; s < stages_.size(); ++s) {
      DeviceScope scope(gpus_[s].device);
      gpus_[s].compute.wait(begin);  // every stage starts from GPU 0's clock
      stages_[s].start.clear();
      stages_[s].stop.clear();
    }
    for (const auto& [s, step] : order) enqueue(s, step, costs, rec);
    DeviceScope scope(gpus_[0].device);
    for (std::size_t s = 1; s < stages_.size(); ++s) {
      {
        DeviceScope other(gpus_[s].device);
        stages_[s].done->record(gpus_[s].compute);
      }
      gpus_[0].compute.wait(*stages_[s].done);
    }
    end.record(gpus_[0].compute);
    end.synchronize();
    busy_ms.assign(stages_.size(), 0);
    for (std::size_t s = 0; s < stages_.size(); ++s)
      for (std::size_t k = 0; k < stages_[s].start.size(); ++k)
        busy_ms[s] += elapsed_ms(stages_[s].start[k], stages_[s].stop[k]);
    return elapsed_ms(begin, end);
  }

  std::vector<float> final_outputs() { return copy_out(stages_.size() - 1, &StageBuffers::out); }
  std::vector<float> input_gradients() { return copy_out(0, &StageBuffers::grad_in); }

 private:
  void enqueue(std::size_t s, StageStep step, Costs costs, MultiGpuRecorder* rec) {
    DeviceScope scope(gpus_[s].device);
    auto& b = stages_[s];
    const std::size_t m = step.micro;
    const bool last = s + 1 == stages_.size();
    StreamView compute = gpus_[s].compute, comm = gpus_[s].comm;
    if (step.forward && s > 0) compute.wait(stages_[s - 1].forward_sent[m]);
    if (!step.forward && !last) compute.wait(stages_[s + 1].backward_sent[m]);
    auto kernel = [&] {
      if (step.forward)
        launch_costly_affine(compute, b.in[m].data(), nullptr, b.out[m].data(), items_, scale_of(s), 0, offset_of(s),
                             costs.forward);
      else
        launch_costly_affine(compute, last ? b.out[m].data() : b.grad_out[m].data(), b.in[m].data(),
                             b.grad_in[m].data(), items_, scale_of(s), kStash, 0, costs.backward);
    };
    b.start.emplace_back(Event::Timing::enabled).record(compute);
    if (rec) rec->on(s).record(compute, Lane::compute, m, items_ * 4, 0, kernel);
    else kernel();
    b.stop.emplace_back(Event::Timing::enabled).record(compute);
    // Hand the result to the neighbour: the activation forward, the gradient back.
    const bool sends = step.forward ? !last : s > 0;
    if (!sends) return;
    const std::size_t to = step.forward ? s + 1 : s - 1;
    Event& computed = step.forward ? b.forward_sent[m] : b.backward_sent[m];
    computed.record(compute);
    comm.wait(computed);
    auto copy = [&] {
      float* dst = step.forward ? stages_[to].in[m].data() : stages_[to].grad_out[m].data();
      const float* src = step.forward ? b.out[m].data() : b.grad_in[m].data();
      SLUICE_CUDA_CHECK(cudaMemcpyPeerAsync(dst, gpus_[to].device, src, gpus_[s].device, items_ * 4, comm.get()));
    };
    if (rec) rec->on(s).record(comm, Lane::peer, m, items_ * 4, 0, copy);
    else copy();
    computed.record(comm);  // now: sent (the same event, re-recorded after the copy)
  }

  std::vector<float> copy_out(std::size_t s, std::vector<DeviceBuffer<float>> StageBuffers::*which) {
    DeviceScope scope(gpus_[s].device);
    std::vector<float> host(micros_ * items_);
    for (std::size_t m = 0; m < micros_; ++m)
      SLUICE_CUDA_CHECK(cudaMemcpy(host.data() + m * items_, (stages_[s].*which)[m].data(), items_ * 4,
                                   cudaMemcpyDeviceToHost));
    return host;
  }

  std::vector<GpuStreams>& gpus_;
  std::size_t micros_, items_;
  std::vector<StageBuffers> stages_;
};

// Peer access where the hardware has it, so copies go GPU to GPU directly
// rather than through host memory; undone on the way out. Memory from
// cudaMallocAsync lives in a pool whose peer access is granted on its own
// (cudaMemPoolSetAccess): without it peer copies are staged through the host.
class PeerAccess {
 public:
  explicit PeerAccess(const std::vector<int>& devices) {
    for (int a : devices)
      for (int b : devices) {
        if (a == b) continue;
        int can = 0;
        SLUICE_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
        all_ &= can != 0;
        if (!can) continue;
        DeviceScope scope(a);
        const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
        if (e == cudaSuccess) enabled_.emplace_back(a, b);
        else if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
        else SLUICE_CUDA_CHECK(e);
        set_pool_access(b, a, cudaMemAccessFlagsProtReadWrite);  // a may use b's pool memory
        pools_.emplace_back(b, a);
      }
  }
  ~PeerAccess() {
    for (auto [owner, user] : pools_) set_pool_access(owner, user, cudaMemAccessFlagsProtNone, false);
    for (auto [a, b] : enabled_) {
      DeviceScope scope(a);
      SLUICE_CUDA_CHECK_NOTHROW(cudaDeviceDisablePeerAccess(b));
    }
  }
  bool everywhere() const { return all_; }

 private:
  static void set_pool_access(int owner, int user, cudaMemAccessFlags flags, bool throws = true) {
    cudaMemPool_t pool = nullptr;
    cudaMemAccessDesc access{};
    access.location.type = cudaMemLocationTypeDevice;
    access.location.id = user;
    access.flags = flags;
    cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, owner);
    if (e == cudaSuccess) e = cudaMemPoolSetAccess(pool, &access, 1);
    if (throws) SLUICE_CUDA_CHECK(e);
    else SLUICE_CUDA_CHECK_NOTHROW(e);
  }
  bool all_ = true;
  std::vector<std::pair<int, int>> enabled_;
  std::vector<std::pair<int, int>> pools_;  // (owner, user)
};

std::uint32_t calibrated(std::vector<GpuStreams>& gpus, float target_ms, std::size_t items) {
  DeviceScope scope(gpus[0].device);
  DeviceBuffer<float> x(items, gpus[0].compute), y(items, gpus[0].compute);
  SLUICE_CUDA_CHECK(cudaMemsetAsync(x.data(), 0, x.bytes(), gpus[0].compute.get()));
  const std::uint32_t probe = 256;
  double ms = 0;
  for (int k = 0; k < 3; ++k)
    ms = timed_step(gpus, [&] { launch_costly_affine(gpus[0].compute, x.data(), nullptr, y.data(), items, 1, 0, 0, probe); });
  return static_cast<std::uint32_t>(std::clamp(probe * target_ms / std::max(ms, 1e-3), 1.0, 1e7));
}

// One hand-off: a micro-batch's activation from GPU 0 to GPU 1.
double hop_ms(std::vector<GpuStreams>& gpus, std::size_t items) {
  DeviceBuffer<float> from, to;
  {
    DeviceScope scope(gpus[0].device);
    from = DeviceBuffer<float>(items, gpus[0].compute);
  }
  {
    DeviceScope scope(gpus[1].device);
    to = DeviceBuffer<float>(items, gpus[1].compute);
  }
  const double ms = median_step(gpus, 5, [&] {
    DeviceScope scope(gpus[0].device);
    SLUICE_CUDA_CHECK(cudaMemcpyPeerAsync(to.data(), gpus[1].device, from.data(), gpus[0].device, items * 4,
                                          gpus[0].comm.get()));
  });
  {
    DeviceScope scope(gpus[1].device);
    to = {};
  }
  return ms;
}

}  // namespace

DemoResult run_pipeline_parallel(const DemoOptions& o) {
  if (Device::count() < 2)
    return skipped_result(kName, kQuestion, "needs two GPUs or more; this machine has " + std::to_string(Device::count()));
  std::vector<int> devices(static_cast<std::size_t>(Device::count()));
  std::iota(devices.begin(), devices.end(), 0);
  const std::size_t stages = devices.size();
  PeerAccess peers(devices);
  auto gpus = make_gpu_streams(devices);
  const std::size_t items = std::max<std::size_t>(size_or(o, std::size_t{4} << 20) / sizeof(float), 1024);
  const int repeats = repeats_or(o, 3);
  // Aimed at 1 ms forwards and 2 ms backwards, scaled from one probe kernel;
  // the probe's fixed part makes them come out shorter (about 0.45 and 0.9 ms
  // on an H200). The bubble is measured from whatever they take.
  const Costs costs{calibrated(gpus, 1.0f, items), calibrated(gpus, 2.0f, items)};
  const double hop = hop_ms(gpus, items);

  DemoResult r = make_result(kName, kQuestion,
                             {"schedule", "micro-batches", "step ms", "bubble", "(S-1)/(M+S-1)", "ratio", "modelled"});
  double worst_ratio_at_4s = 0;
  bool all_match = true;
  std::string mismatch;
  for (std::size_t micros : {stages, 4 * stages, 8 * stages}) {
    std::vector<float> input(micros * items);
    for (std::size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f;

    // The reference: the same model, every stage on GPU 0, one step after another.
    std::vector<GpuStreams> one_gpu = make_gpu_streams(std::vector<int>(stages, devices[0]));
    SplitModel reference(one_gpu, micros, items);
    reference.load(input);
    std::vector<double> busy;
    reference.step(issue_order(pipeline_schedule(PipelineScheduleKind::gpipe, stages, micros)), costs, busy);
    const auto want_out = reference.final_outputs();
    const auto want_grad = reference.input_gradients();

    SplitModel model(gpus, micros, items);
    model.load(input);
    for (auto kind : {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b}) {
      const auto order = issue_order(pipeline_schedule(kind, stages, micros));
      model.step(order, costs, busy);  // warm-up
      std::vector<double> makespans, bubbles, forward_ms;
      for (int k = 0; k < repeats; ++k) {
        model.poison();
        const double ms = model.step(order, costs, busy);
        makespans.push_back(ms);
        bubbles.push_back(1.0 - std::accumulate(busy.begin(), busy.end(), 0.0) / (static_cast<double>(stages) * ms));
      }
      const bool match = model.final_outputs() == want_out && model.input_gradients() == want_grad;
      if (!match && mismatch.empty())
        mismatch = fmt::format("{}, {} micro-batches: output or input gradient differs from one GPU's",
                               kind == PipelineScheduleKind::gpipe ? "GPipe" : "1F1B", micros);
      all_match &= match;
      const double step_ms = summarize(makespans).median, bubble = summarize(bubbles).median;
      const double ideal = ideal_bubble(stages, micros);
      // The same schedule played with the measured costs: a forward (a third of
      // a forward-and-backward), a backward, and a hand-off between GPUs.
      const double forward = std::accumulate(busy.begin(), busy.end(), 0.0) / (static_cast<double>(stages * micros) * 3.0);
      const auto modelled = time_schedule(pipeline_schedule(kind, stages, micros), forward, 2 * forward, hop);
      const std::string name = kind == PipelineScheduleKind::gpipe ? "GPipe" : "1F1B";
      r.rows.push_back({name, std::to_string(micros), fixed(step_ms, 2), fixed(bubble, 3), fixed(ideal, 3),
                        fixed(bubble / ideal, 2), fixed(modelled.bubble_fraction, 3)});
      r.figures[fmt::format("{}_m{}_bubble", name, micros)] = bubble;
      r.figures[fmt::format("{}_m{}_step_ms", name, micros)] = step_ms;
      if (micros == 4 * stages) worst_ratio_at_4s = std::max(worst_ratio_at_4s, bubble / ideal);
      if (micros == 4 * stages) {
        MultiGpuRecorder rec(gpus);
        model.step(order, costs, busy, &rec);
        r.traces.push_back(rec.trace(fmt::format("pipeline-parallel: {}, {} stages, {} micro-batches", name, stages, micros)));
      }
    }
  }
  r.figures["stages"] = static_cast<double>(stages);
  r.figures["hop_ms"] = hop;
  r.figures["worst_ratio_m4s"] = worst_ratio_at_4s;
  r.verified = all_match;
  r.verification = all_match ? fmt::format("every micro-batch's output and input gradient equal, bit for bit, the same "
                                           "model run on one GPU (outputs poisoned before each run)")
                             : mismatch;
  r.conclusion = fmt::format(
      "with {} stages on {} GPUs ({}, {:.3f} ms a hand-off), the measured bubble at M = 4S was at most {:.2f}x the textbook "
      "(S-1)/(M+S-1); it shrinks as micro-batches grow, at the price of more activations held (GPipe keeps all M, "
      "1F1B at most S per stage)",
      stages, stages, peers.everywhere() ? "peer copies GPU to GPU" : "no peer access: copies staged through the host",
      hop, worst_ratio_at_4s);
  return r;
}

}  // namespace sluice::demo
