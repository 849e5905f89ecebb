// Pipeline::rerun_stages_alone: each stage timed by itself over the last
// run's chunks. A diagnostic of the pipeline's own chunking; the absolute
// bound (bound.hpp) does not depend on it.
#include <algorithm>
#include <stdexcept>

#include "engine.hpp"
#include "sluice/device_scope.hpp"
#include "sluice/error.hpp"
#include "sluice/event_timer.hpp"

namespace sluice {

StageCosts Pipeline::rerun_stages_alone(int repeats) {
  if (!engine_) throw std::logic_error("use of a moved-from Pipeline");
  Engine& e = *engine_;
  if (e.busy) throw std::logic_error("cannot rerun stages while a run is in flight");
  if (repeats < 1) throw std::invalid_argument("repeats must be at least 1");
  if (!e.slots_filled || !e.last_plan)
    throw std::logic_error("rerun_stages_alone() reruns the compute on what the last run left in the slots: run first");
  const DeviceScope scope(e.device);
  const ChunkPlan& plan = *e.last_plan;

  // Pinned scratch of one chunk per span: the copy engines run at their
  // page-locked speed whatever the caller's memory is, and the caller's
  // outputs are left alone.
  std::vector<PinnedBuffer<std::byte>> scratch;
  StageCosts costs;
  for (const auto& s : e.spans) {
    scratch.emplace_back(plan.chunk_items() * s.item_bytes);
    if (s.copied_in()) costs.h2d_bytes += static_cast<double>(s.bytes());
    if (s.copied_out()) costs.d2h_bytes += static_cast<double>(s.bytes());
  }
  auto copies = [&](bool in, StreamView stream) {
    for (std::size_t c = 0; c < plan.chunk_count(); ++c) {
      const ItemRange range = plan.chunk(c);
      for (std::size_t k = 0; k < e.spans.size(); ++k) {
        const auto& s = e.spans[k];
        if (in ? !s.copied_in() : !s.copied_out()) continue;
        void* slot = e.device_slots[k][c % e.depth()].data();
        const std::size_t bytes = range.size() * s.item_bytes;
        if (in)
          SLUICE_CUDA_CHECK(cudaMemcpyAsync(slot, scratch[k].data(), bytes, cudaMemcpyHostToDevice, stream.get()));
        else
          SLUICE_CUDA_CHECK(cudaMemcpyAsync(scratch[k].data(), slot, bytes, cudaMemcpyDeviceToHost, stream.get()));
      }
    }
  };
  auto fastest = [](const std::vector<double>& samples) { return *std::min_element(samples.begin(), samples.end()); };
  Event fork, join;
  costs.h2d_ms = fastest(time_with_events(e.h2d, 1, repeats, [&](StreamView s) { copies(true, s); }));
  costs.d2h_ms = fastest(time_with_events(e.d2h, 1, repeats, [&](StreamView s) { copies(false, s); }));
  std::vector<Event> joins(e.compute.size());
  std::vector<DeviceSlot> slots(e.spans.size());
  costs.kernel_ms = fastest(time_with_events(e.h2d, 1, repeats, [&](StreamView s) {
    fork.record(s);
    for (auto& stream : e.compute) stream.wait(fork);
    for (std::size_t c = 0; c < plan.chunk_count(); ++c) {
      for (std::size_t k = 0; k < e.spans.size(); ++k)
        slots[k] = {e.device_slots[k][c % e.depth()].data(), e.spans[k].item_bytes};
      Stream& stream = e.compute[c % e.compute.size()];
      e.compute_fn(Chunk{c, plan.chunk_count(), plan.chunk(c), stream.view(), slots, e.generation});
      SLUICE_CUDA_CHECK(cudaGetLastError());
    }
    for (std::size_t k = 0; k < e.compute.size(); ++k) {
      joins[k].record(e.compute[k]);
      s.wait(joins[k]);
    }
  }));
  if (costs.h2d_bytes > 0 && costs.d2h_bytes > 0)
    costs.both_ms = fastest(time_with_events(e.h2d, 1, repeats, [&](StreamView s) {
      fork.record(s);
      e.d2h.wait(fork);
      copies(true, s);
      copies(false, e.d2h);
      join.record(e.d2h);
      s.wait(join);
    }));
  return costs;
}

}  // namespace sluice
