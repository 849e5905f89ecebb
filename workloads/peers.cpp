#include "peers.hpp"

#include <array>
#include <map>
#include <memory>
#include <mutex>

#include "sluice/core/error.hpp"
#include "sluice/pipeline/chunk_plan.hpp"

namespace sluice::workloads {

namespace {

// Device arrays for a workload: inputs, then the output.
struct DeviceArrays {
  DeviceArrays(const Workload& w, std::size_t n, StreamView stream) : items(n) {
    for (std::size_t a = 0; a < w.input_count() + 1; ++a) arrays.emplace_back(items, stream);
    stream.synchronize();
  }
  const float* const* inputs(std::size_t offset) {
    for (std::size_t a = 0; a + 1 < arrays.size(); ++a) input_ptrs[a] = arrays[a].data() + offset;
    return input_ptrs.data();
  }
  float* output(std::size_t offset) { return arrays.back().data() + offset; }
  float* array(std::size_t a, std::size_t offset) { return arrays[a].data() + offset; }
  std::size_t items = 0;
  std::vector<DeviceBuffer<float>> arrays;
  std::array<const float*, 2> input_ptrs{};
};

// The whole-array peers of one problem share its device arrays: each peer's
// run() returns with its work complete, so two never use them at once, and a
// sweep of them (measured in rounds, all alive together) holds one copy of
// the data on the device instead of one per peer.
std::shared_ptr<DeviceArrays> whole_arrays(const Problem& p, StreamView stream) {
  static std::mutex mutex;
  static std::map<const Problem*, std::weak_ptr<DeviceArrays>> shared;
  std::lock_guard lock(mutex);
  std::erase_if(shared, [](const auto& entry) { return entry.second.expired(); });
  if (auto arrays = shared[&p].lock(); arrays && arrays->items == p.items()) return arrays;
  auto arrays = std::make_shared<DeviceArrays>(p.workload(), p.items(), stream);
  shared[&p] = arrays;
  return arrays;
}

std::size_t bytes_in(const Problem& p, ItemRange r) { return r.size() * sizeof(float) * p.workload().input_count(); }
std::size_t bytes_out(ItemRange r) { return r.size() * sizeof(float); }

// Inputs' items r to device arrays starting at `first` (r.begin for whole arrays, 0 for slots).
void copy_in(Problem& p, DeviceArrays& d, ItemRange r, std::size_t first, StreamView s) {
  for (std::size_t a = 0; a < p.workload().input_count(); ++a)
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(d.array(a, first), p.input(a).data() + r.begin, r.size() * sizeof(float),
                                      cudaMemcpyHostToDevice, s.get()));
}

void copy_out(Problem& p, float* device_out, ItemRange r, StreamView s) {
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(p.output().data() + r.begin, device_out, r.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, s.get()));
}

class Synchronous final : public Peer {
 public:
  explicit Synchronous(const Problem& p) : shared_(whole_arrays(p, StreamView(cudaStreamLegacy))), device_(*shared_) {}
  std::string name() const override { return "synchronous"; }
  void run(Problem& p, TraceRecorder* recorder) override {
    const std::size_t bytes = p.items() * sizeof(float);
    const StreamView legacy(cudaStreamLegacy);
    const ItemRange all{0, p.items()};
    maybe_record(recorder, legacy, Lane::h2d, 0, bytes_in(p, all), 0, [&] {
      for (std::size_t a = 0; a < p.workload().input_count(); ++a)
        SLUICE_CUDA_CHECK(cudaMemcpy(device_.array(a, 0), p.input(a).data(), bytes, cudaMemcpyHostToDevice));
    });
    maybe_record(recorder, legacy, Lane::compute, 0, 0, 0,
                 [&] { p.workload().launch(legacy, device_.inputs(0), device_.output(0), p.items()); });
    maybe_record(recorder, legacy, Lane::d2h, 0, bytes, 0, [&] {
      SLUICE_CUDA_CHECK(cudaMemcpy(p.output().data(), device_.output(0), bytes, cudaMemcpyDeviceToHost));
    });
    mark_enqueued();  // each call above waited for its work: nothing was left to enqueue
  }

 private:
  std::shared_ptr<DeviceArrays> shared_;
  DeviceArrays& device_;
};

class Staircase final : public Peer {
 public:
  Staircase(const Problem& p, unsigned streams)
      : streams_(streams), shared_(whole_arrays(p, StreamView())), device_(*shared_) {}
  std::string name() const override { return "staircase, " + std::to_string(streams_.size()) + " streams"; }
  void run(Problem& p, TraceRecorder* recorder) override {
    const std::size_t per_stream = (p.items() + streams_.size() - 1) / streams_.size();
    const ChunkPlan plan(p.items(), per_stream > 0 ? per_stream : 1);
    for (std::size_t i = 0; i < plan.chunk_count(); ++i) {
      const ItemRange r = plan.chunk(i);
      StreamView s = streams_[i];
      const int lane_row = static_cast<int>(i);
      maybe_record(recorder, s, Lane::h2d, i, bytes_in(p, r), lane_row, [&] { copy_in(p, device_, r, r.begin, s); });
      maybe_record(recorder, s, Lane::compute, i, 0, lane_row, [&] {
        p.workload().launch(s, device_.inputs(r.begin), device_.output(r.begin), r.size());
      });
      maybe_record(recorder, s, Lane::d2h, i, bytes_out(r), lane_row,
                   [&] { copy_out(p, device_.output(r.begin), r, s); });
    }
    mark_enqueued();
    for (auto& s : streams_) s.synchronize();
  }

 private:
  std::vector<Stream> streams_;
  std::shared_ptr<DeviceArrays> shared_;
  DeviceArrays& device_;
};

class TripleBuffer final : public Peer {
 public:
  TripleBuffer(const Problem& p, std::size_t chunk_items) : chunk_items_(chunk_items) {
    for (auto& slot : slots_) slot = std::make_unique<DeviceArrays>(p.workload(), chunk_items, h2d_);
  }
  std::string name() const override { return "triple buffer, 3 streams + events"; }
  void run(Problem& p, TraceRecorder* recorder) override {
    const ChunkPlan plan(p.items(), chunk_items_);
    for (std::size_t c = 0; c < plan.chunk_count(); ++c) {
      const ItemRange r = plan.chunk(c);
      const std::size_t s = c % 3;
      DeviceArrays& slot = *slots_[s];
      h2d_.wait(copied_out_[s]);  // the slot's previous chunk has left the device
      maybe_record(recorder, h2d_, Lane::h2d, c, bytes_in(p, r), 0, [&] { copy_in(p, slot, r, 0, h2d_); });
      copied_in_[s].record(h2d_);
      compute_.wait(copied_in_[s]);
      maybe_record(recorder, compute_, Lane::compute, c, 0, 0,
                   [&] { p.workload().launch(compute_, slot.inputs(0), slot.output(0), r.size()); });
      computed_[s].record(compute_);
      d2h_.wait(computed_[s]);
      maybe_record(recorder, d2h_, Lane::d2h, c, bytes_out(r), 0, [&] { copy_out(p, slot.output(0), r, d2h_); });
      copied_out_[s].record(d2h_);
    }
    mark_enqueued();
    d2h_.synchronize();
  }

 private:
  std::size_t chunk_items_;
  Stream h2d_, compute_, d2h_;
  std::array<std::unique_ptr<DeviceArrays>, 3> slots_;
  std::array<Event, 3> copied_in_, computed_, copied_out_;
};

}  // namespace

std::unique_ptr<Peer> make_synchronous(const Problem& p) { return std::make_unique<Synchronous>(p); }
std::unique_ptr<Peer> make_staircase(const Problem& p, unsigned streams) {
  return std::make_unique<Staircase>(p, streams);
}
std::unique_ptr<Peer> make_triple_buffer(const Problem& p, std::size_t chunk_items) {
  return std::make_unique<TripleBuffer>(p, chunk_items);
}

}  // namespace sluice::workloads
