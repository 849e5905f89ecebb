#pragma once
// The host's side of streamed weights (sluice::StreamedWeights), apart from
// any GPU so that CI tests it: the order in which the layers pass through
// the ring, each layer's block as the ring lays it out, and how many layers
// ahead a device budget allows. Host-only.
#include <cstddef>
#include <vector>

#include "ring/block_layout.hpp"
#include "ring/layer_steps.hpp"
#include "sluice/weights/streamed_weights.hpp"

namespace sluice::weights {

using ring::LayerStep;

// Positions 0, 1, 2 ... forever, in the order ring/layer_steps.hpp states.
class LayerOrder {
 public:
  // Throws std::invalid_argument for no layers.
  LayerOrder(std::size_t layers, bool backward);
  std::size_t layers() const { return layers_; }
  bool backward() const { return backward_; }
  std::size_t per_pass() const { return ring::layer_positions(layers_, backward_); }
  LayerStep at(std::size_t position) const { return ring::layer_step(position, layers_, backward_); }

 private:
  std::size_t layers_;
  bool backward_;
};

// The ring's alignment of each piece in a layer's block.
inline constexpr std::size_t piece_align = 256;

// Each layer's block (ring::lay_out at piece_align), after checking that
// every layer has pieces and bytes, and every piece with bytes has data and
// is marked page-locked. Throws std::invalid_argument naming the layer and piece.
std::vector<ring::BatchLayout> lay_out_layers(const std::vector<std::vector<BatchPiece>>& layers);

// The largest of the layers' blocks: every device slot's size.
std::size_t largest_block(const std::vector<ring::BatchLayout>& layouts);

// The layers copied ahead of the one computing: options.ahead, or the most
// that device_budget holds in slots of `block` bytes (one is the layer
// computing); either capped at per_pass - 1 (at least 1). Throws
// std::invalid_argument for ahead 0 without a budget, or a budget below two
// slots, saying how many bytes are needed.
std::size_t choose_ahead(const StreamedWeightsOptions& options, std::size_t block, std::size_t per_pass);

}  // namespace sluice::weights
