#include "weights/layer_order.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "sluice/core/ahead.hpp"

namespace sluice::weights {

LayerOrder::LayerOrder(std::size_t layers, bool backward) : layers_(layers), backward_(backward) {
  if (layers == 0) throw std::invalid_argument("StreamedWeights: no layers to stream");
  if (layers > SIZE_MAX / 2) throw std::invalid_argument("StreamedWeights: too many layers");
}

std::vector<ring::BatchLayout> lay_out_layers(const std::vector<std::vector<BatchPiece>>& layers) {
  if (layers.empty()) throw std::invalid_argument("StreamedWeights: no layers to stream");
  std::vector<ring::BatchLayout> layouts;
  layouts.reserve(layers.size());
  std::vector<ring::HostPiece> host;
  for (std::size_t k = 0; k < layers.size(); ++k) {
    if (layers[k].empty()) throw std::invalid_argument(fmt::format("StreamedWeights: layer {} has no pieces", k));
    host.clear();
    // Each piece's bytes and its alignment's padding: a bound on the block that cannot wrap.
    std::size_t most = 0;
    for (std::size_t i = 0; i < layers[k].size(); ++i) {
      const BatchPiece& piece = layers[k][i];
      // Laid out with its empty pieces too (an empty tensor: nothing to copy
      // or check), so that offsets[i] is piece i's.
      host.push_back({static_cast<const std::byte*>(piece.data), piece.bytes, true});
      if (piece.bytes == 0) continue;
      if (!piece.data)
        throw std::invalid_argument(fmt::format("StreamedWeights: piece {} of layer {} has {} bytes and no data", i, k, piece.bytes));
      if (!piece.page_locked)
        throw std::invalid_argument(fmt::format(
            "StreamedWeights: piece {} of layer {} is not marked page_locked: the weights are copied where they lie, "
            "from page-locked host memory (cudaHostAlloc, or cudaHostRegister / sluice::HostRegistration)", i, k));
      if (piece.bytes > SIZE_MAX / 4 - most - piece_align)
        throw std::invalid_argument(fmt::format("StreamedWeights: layer {} is too large to lay out", k));
      most += piece.bytes + piece_align;
    }
    if (most == 0) throw std::invalid_argument(fmt::format("StreamedWeights: layer {} has no bytes", k));
    layouts.push_back(ring::lay_out(host, piece_align));
  }
  return layouts;
}

std::size_t largest_block(const std::vector<ring::BatchLayout>& layouts) {
  std::size_t block = 0;
  for (const ring::BatchLayout& layout : layouts) block = std::max(block, layout.bytes);
  return block;
}

std::size_t choose_ahead(const StreamedWeightsOptions& options, std::size_t block, std::size_t per_pass) {
  // Beyond a pass less one, every position of the pass is already on its
  // way: a layer further ahead is one of the next pass, copied again.
  const std::size_t most = std::clamp<std::size_t>(per_pass - 1, 1, most_ahead);
  if (!options.device_budget) {
    if (options.ahead == 0) throw std::invalid_argument("StreamedWeights: ahead must be at least 1 layer");
    if (options.ahead > most_ahead)
      throw std::invalid_argument(fmt::format("StreamedWeights: ahead must be at most {} layers (sluice::most_ahead)", most_ahead));
    return std::min(options.ahead, most);
  }
  const std::size_t budget = *options.device_budget;
  // The layer computing (its slot released only at the next take) and one ahead of it.
  constexpr std::size_t least_slots = 2;
  if (budget / least_slots < block)
    throw std::invalid_argument(fmt::format(
        "StreamedWeights: a device_budget of {} bytes cannot hold the {} device slots streaming needs at least (the layer "
        "computing and one ahead), each of the largest layer's block of {} bytes: give at least {} bytes",
        budget, least_slots, block, least_slots * block));
  return std::min(budget / block - 1, most);
}

}  // namespace sluice::weights
