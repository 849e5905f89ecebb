#include "weights/layer_ring.hpp"

#include <stdexcept>
#include <utility>

namespace sluice::weights {

ring::RingOptions LayerRing::options(std::size_t ahead) {
  if (ahead == 0) throw std::invalid_argument("StreamedWeights: ahead must be at least 1 layer");
  ring::RingOptions o;
  o.items = ring::RingOptions::unbounded;  // pass after pass, in an order of this class's
  o.ahead = ahead;
  o.held = 1;  // taking p releases p - 1 on the consumer's lane, after its kernels
  // Nothing is staged (the pieces are page-locked), but a caller's ring is a
  // staged one: each staging slot, 1 MiB of page-locked memory, makes the
  // host wait for the copy that used it last. One per device slot (the
  // default) lets the host run as far ahead as the slots do.
  o.staging_slots = 0;
  o.slot_bytes = 1;  // given the largest block by each slot's first copy
  return o;
}

LayerRing::LayerRing(ring::RingExecutor& executor, std::vector<std::vector<BatchPiece>> layers,
                     std::vector<ring::BatchLayout> layouts, LayerOrder order, std::size_t ahead)
    : layers_(std::move(layers)),
      layouts_(std::move(layouts)),
      order_(order),
      ahead_(ahead),
      block_(largest_block(layouts_)),
      ring_(ring::RingPlan(options(ahead)), executor, {.put_by_caller = true}) {
  if (layers_.size() != order_.layers() || layouts_.size() != order_.layers())
    throw std::invalid_argument("StreamedWeights: a layout for every layer");
}

LayerRing::~LayerRing() { stop(); }

void LayerRing::put_through(std::size_t position) {
  for (; put_ <= position; ++put_) {
    const std::size_t k = order_.at(put_).layer;
    ring::Ring::Item item;
    item.bytes = block_;
    for (std::size_t i = 0; i < layers_[k].size(); ++i) {
      const BatchPiece& piece = layers_[k][i];
      if (piece.bytes == 0) continue;
      item.pieces.push_back({static_cast<const std::byte*>(piece.data), layouts_[k].offsets[i], piece.bytes});
    }
    (void)ring_.put(item);
  }
}

LayerRing::Taken LayerRing::next(ring::ConsumerLane lane) {
  if (stopped_) throw std::logic_error("StreamedWeights: next() after stop()");
  if (failed_) throw std::logic_error("StreamedWeights: next() after a failure, which stopped it");
  try {
    // Position p may be put once p - ahead is taken.
    put_through(taken_ + ahead_ - 1);
    auto taken = ring_.take(lane);
    if (!taken) throw std::logic_error("StreamedWeights: the ring ended");  // never closed: cannot happen
    const std::size_t p = taken_++;
    // Copied while p computes, into the slot p - 1 left: the copy waits on
    // the GPU for p - 1's release, never the host.
    put_through(p + ahead_);
    const LayerStep step = order_.at(p);
    return {p, step, taken->data, &layouts_[step.layer]};
  } catch (...) {
    failed_ = true;
    ring_.stop();
    throw;
  }
}

void LayerRing::stop() noexcept {
  stopped_ = true;
  ring_.stop();
}

}  // namespace sluice::weights
