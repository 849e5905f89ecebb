#include "sluice/measure/tuner.hpp"

#include <algorithm>


namespace sluice {

std::vector<PipelineOptions> sweep_settings(std::size_t items, std::size_t item_bytes, KernelOrder order) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  const std::size_t bytes = items * std::max<std::size_t>(item_bytes, 1);
  const bool large = bytes > 2048 * MiB;
  std::vector<PipelineOptions> settings;
  // Small data: chunks below 1 MiB too, deeper rings for their number, and
  // (kernels that may overlap) more compute streams, so that kernels too
  // small to fill the SMs alone run side by side.
  if (bytes <= 32 * MiB)
    for (std::size_t chunk : {256 * 1024, 512 * 1024})
      for (std::size_t depth : {4, 8}) {
        if (chunk >= bytes) continue;  // one chunk of all the data is no pipeline
        for (unsigned streams : {0u, 4u}) {
          if (streams > 0 && order != KernelOrder::independent) continue;
          PipelineOptions o;
          o.chunk_items = std::max<std::size_t>(1, chunk / std::max<std::size_t>(item_bytes, 1));
          o.depth = depth;
          o.kernel_order = order;
          o.compute_streams = streams;
          settings.push_back(o);
        }
      }
  std::vector<std::size_t> depths = large ? std::vector<std::size_t>{3, 4} : std::vector<std::size_t>{2, 3, 4, 6};
  for (std::size_t chunk = MiB; chunk <= 64 * MiB; chunk *= 2) {
    const std::size_t chunk_items = std::max<std::size_t>(1, chunk / item_bytes);
    if (chunk_items >= items && chunk > MiB) break;  // larger chunks are all the same one chunk
    for (bool ramp : {false, true}) {
      if (large && !ramp) continue;
      for (std::size_t depth : depths) {
        PipelineOptions o;
        o.chunk_items = chunk_items;
        o.first_chunk_items = ramp ? std::max<std::size_t>(1, chunk_items / 16) : 0;
        o.depth = depth;
        o.kernel_order = order;
        settings.push_back(o);
      }
    }
  }
  return settings;
}

ModelInput with_setting(ModelInput base, const PipelineOptions& options) {
  base.options = options;
  return base;
}

ModelChoice choose_with_model(const ModelInput& base) {
  std::size_t widest = 1;
  for (const SpanShape& s : base.spans) widest = std::max(widest, s.item_bytes);
  ModelChoice best;
  bool first = true;
  for (const PipelineOptions& o : sweep_settings(base.items, widest, base.options.kernel_order)) {
    const double ms = predict(with_setting(base, o)).ms;
    if (first || ms < best.predicted_ms) best = {o, ms};
    first = false;
  }
  return best;
}

}  // namespace sluice
