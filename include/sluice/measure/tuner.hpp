#pragma once
// Choosing chunk sizes and depth: the settings `sluice tune` measures, and
// the model's pick among them. Host-only.
#include <cstddef>
#include <vector>

#include "sluice/measure/model.hpp"
#include "sluice/pipeline/pipeline_options.hpp"

namespace sluice {

// The settings of a sweep over `bytes` of data per span: largest chunk from
// 1 MiB to 64 MiB (up to the data), with and without a ramp, depth 2 to 6;
// data of 32 MiB or less also 256 and 512 KiB chunks, depth 4 and 8, on the
// default compute streams and (kernels `order` lets overlap) on four. Large
// data gets a coarser sweep (each run there takes long). Every setting has
// `order` as its kernel order.
std::vector<PipelineOptions> sweep_settings(std::size_t item_count, std::size_t item_bytes,
                                            KernelOrder order = KernelOrder::in_chunk_order);

struct ModelChoice {
  PipelineOptions options;
  double predicted_ms = 0;
};

// `base` run with `options` instead of its own: what the model predicts for that setting.
ModelInput with_setting(ModelInput base, const PipelineOptions& options);

// The setting of the sweep the model predicts fastest; `base` gives the
// rates, costs, kernel, spans, items and kernel order (its other options are replaced).
ModelChoice choose_with_model(const ModelInput& base);

}  // namespace sluice
