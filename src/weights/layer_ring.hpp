#pragma once
// The engine of streamed weights (sluice::StreamedWeights): a ring
// (ring/ring.hpp) whose items are a model's layers in their order
// (layer_order.hpp), put and taken on the caller's one thread. Host-only: it
// runs on a GPU's ring executor, and on the host executor that CI tests it with.
//
// Position p may be put once position p - ahead is taken (the ring's lead):
// next() puts up to p + ahead - 1 before it takes p, and p + ahead after, so
// that layer's copy runs while p computes. A put therefore never waits for a
// take that this thread has yet to make. The consumer holds one position: the
// take of p releases p - 1 at that point of its lane, and the copy into that
// slot (p + ahead's, with ahead + 1 slots) waits there for it.
//
// Every item claims the largest layer's block, so that each device slot is
// given that size by its first copy and never again: the slots hold at most
// (ahead + 1) x that block.
#include <cstddef>
#include <vector>

#include "ring/ring.hpp"
#include "weights/layer_order.hpp"

namespace sluice::weights {

class LayerRing {
 public:
  // `layouts[k]`: layers[k]'s block (lay_out_layers, which checks them).
  // Throws std::invalid_argument for ahead 0, or what the executor's make_slots throws.
  LayerRing(ring::RingExecutor& executor, std::vector<std::vector<BatchPiece>> layers,
            std::vector<ring::BatchLayout> layouts, LayerOrder order, std::size_t ahead);
  ~LayerRing();
  LayerRing(const LayerRing&) = delete;
  LayerRing& operator=(const LayerRing&) = delete;

  struct Taken {
    std::size_t position = 0;
    LayerStep step;
    std::byte* data = nullptr;  // the block in its device slot, valid on the lane until the next take
    const ring::BatchLayout* layout = nullptr;  // the layer's
  };
  // The next position, ready on `lane`. Throws std::logic_error once stopped
  // or after a failure; what a put throws (the ring is then stopped).
  Taken next(ring::ConsumerLane lane);
  void stop() noexcept;

  std::size_t ahead() const { return ahead_; }
  std::size_t block_bytes() const { return block_; }  // the largest layer's: each slot's
  std::size_t slots() const { return ring_.plan().slots(); }

 private:
  static ring::RingOptions options(std::size_t ahead);
  // Puts positions up to and including `position` that are not put yet.
  void put_through(std::size_t position);

  std::vector<std::vector<BatchPiece>> layers_;
  std::vector<ring::BatchLayout> layouts_;
  LayerOrder order_;
  std::size_t ahead_;
  std::size_t block_ = 0;
  std::size_t put_ = 0;    // positions put
  std::size_t taken_ = 0;  // positions taken
  bool failed_ = false;
  bool stopped_ = false;
  ring::Ring ring_;  // last: its slots go first, its lanes drained before the pieces above are let go
};

}  // namespace sluice::weights
