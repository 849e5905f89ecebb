#pragma once
// A model's weights streamed through the GPU: each layer's weights live in
// page-locked host memory and are copied into a ring of device slots on a
// copy stream while the layers before compute, so that device memory holds
// `ahead + 1` layers whatever the model's size (Python: sluice.StreamedLayers).
//
//   sluice::StreamedWeights weights(std::move(layers), {.device_budget = 4ull << 30});
//   for (std::size_t k = 0; k < layer_count; ++k) {
//     const auto layer = weights.next(compute);   // compute waits for the copy, the host does not
//     auto* w = reinterpret_cast<const float*>(layer.data + layer.offsets[0]);
//     layer_forward<<<grid, block, 0, compute>>>(w, activations);
//   }
//
// layers[k] is layer k's weights as pieces of page-locked host memory
// (cudaHostAlloc'd, or cudaHostRegister'd / sluice::HostRegistration), each
// marked page_locked: the copy reads them where they lie, with no staging. A
// layer reaches the device as one block, each piece at an offset aligned to
// 256 bytes (Layer::offsets).
//
// The order runs forever, pass after pass: layers 0 .. L-1, or, with
// `backward`, 0 .. L-1 then L-1 .. 0 (a training step's forward and
// backward). next() hands the next layer of that order, ready on the compute
// stream, and releases the layer taken before it at that point of the
// stream: every kernel the caller enqueued on it for that layer still reads
// valid memory, and only the copies after it wait for those kernels. Pass the
// same compute stream to every next() (or make a new one wait for the old
// one's work first): the release is ordered on the stream of the next take.
//
// One thread calls next(): the copies are enqueued on that thread, with no
// thread of the object's own. The host waits in next() only for the copy of
// the layer taken before (the ring's rule for reusing a staging slot, kept
// though nothing is staged): where the link is the slower engine, the host
// runs one layer ahead of the copies, enqueuing layer k's kernels while
// layer k - 1's run; where compute is, the copies are long done.
//
// The pieces' memory is the caller's: it stays allocated, page-locked and
// unchanged until stop() returns or the object is destroyed. The copies read
// it on the copy stream at times the host does not see, up to `ahead`
// positions before the layer is taken, and so into the next pass: no point
// between next() calls is safe to change a layer's weights (stepped by an
// optimizer, say). Make a new StreamedWeights over the changed weights.
#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "sluice/core/stream_view.hpp"
#include "sluice/loader/batch_prefetcher.hpp"  // BatchPiece

namespace sluice {

struct StreamedWeightsOptions {
  std::size_t ahead = 1;  // layers copied ahead of the one computing (capped as device_budget's)
  // Bytes of device slots: when set, `ahead` is ignored and becomes the most
  // that fit, floor(budget / block) - 1, where block is the largest layer's,
  // capped at the positions of a pass less one (more cannot help).
  std::optional<std::size_t> device_budget = std::nullopt;
  bool backward = false;  // each pass: layers 0 .. L-1 then L-1 .. 0
  std::optional<int> device = std::nullopt;  // none: the device current at construction
};

class StreamedWeights {
 public:
  // Checks everything before any device memory is taken, and throws
  // std::invalid_argument naming what is wrong: no layers; a layer with no
  // pieces or no bytes; a piece with bytes and no data; a piece not marked
  // page_locked, or that the driver says is not page-locked host memory
  // (pageable, or device memory); ahead 0; a device_budget below two slots
  // of the largest layer's block (the layer computing and one ahead), or
  // slots beyond the device's free memory. CudaError (sluice/core/error.hpp)
  // for a device that cannot be used.
  explicit StreamedWeights(std::vector<std::vector<BatchPiece>> layers, StreamedWeightsOptions options = {});
  ~StreamedWeights();  // stops: waits for its copies, not for the compute stream
  StreamedWeights(const StreamedWeights&) = delete;
  StreamedWeights& operator=(const StreamedWeights&) = delete;

  struct Layer {
    std::size_t index = 0;     // the layer: layers[index]
    bool backward = false;     // taken in the pass's backward half
    std::size_t pass = 0;      // 0, 1, 2 ...
    const std::byte* data = nullptr;  // the block on the device: valid on `compute` until the next next()
    std::vector<std::size_t> offsets;  // each piece's, in data
    std::size_t bytes = 0;     // of this layer's block
  };
  // The next layer in the order, ready on `compute`'s stream. Throws
  // std::logic_error after stop() or after a failure, and what enqueuing a
  // copy threw (CudaError), after which the object is stopped.
  Layer next(StreamView compute);

  std::size_t ahead() const;
  // Device memory of the slots: (ahead + 1) x the largest layer's block.
  // The most the ring holds on the device; what device_budget bounds.
  std::size_t device_bytes() const;
  int device() const;

  // Ends early: no copy runs once it returns. The slots are freed in the
  // order of the compute stream, so kernels enqueued there still read them.
  // Idempotent.
  void stop() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
