#pragma once
// A model's layers in the order a training step runs them, pass after pass:
// the forward 0 .. L-1, then, with a backward, L-1 .. 0 (the last layer twice
// in a row where the forward turns back, and layer 0 twice where one pass
// meets the next); forward only, 0 .. L-1 each pass. The one statement of that
// order: a ring of layers (Order::layers), the streamed weights and the
// Python StreamedLayers read it. Host-only.
#include <cstddef>

namespace sluice::ring {

// Where a position falls: the pass, its half, the layer.
struct LayerStep {
  std::size_t pass = 0;
  bool backward = false;
  std::size_t layer = 0;
  friend bool operator==(const LayerStep&, const LayerStep&) = default;
};

// Positions in one pass: 2L with a backward, L without.
constexpr std::size_t layer_positions(std::size_t layers, bool with_backward) {
  return with_backward ? 2 * layers : layers;
}

constexpr LayerStep layer_step(std::size_t position, std::size_t layers, bool with_backward) {
  const std::size_t per_pass = layer_positions(layers, with_backward);
  const std::size_t i = position % per_pass;
  if (i < layers) return {position / per_pass, false, i};
  return {position / per_pass, true, 2 * layers - 1 - i};
}

// Where in its pass a layer runs: going forward, or on the backward's way back.
constexpr std::size_t position_in_pass(std::size_t layer, bool backward, std::size_t layers) {
  return backward ? 2 * layers - 1 - layer : layer;
}

}  // namespace sluice::ring
