// sluice::StreamedWeights: the layer ring (weights/layer_ring.hpp) on a
// GPU's ring executor, after the checks only the CUDA runtime can make.
#include "sluice/weights/streamed_weights.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>
#include <utility>

#include "ring/cuda_ring_executor.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/pointer_query.hpp"
#include "weights/layer_order.hpp"
#include "weights/layer_ring.hpp"

namespace sluice {

namespace {

// The flag says what the caller believes; the driver says what the memory
// is. A pageable piece would fail its copy, or worse, run as a synchronous one.
void check_page_locked(const std::vector<std::vector<BatchPiece>>& layers) {
  for (std::size_t k = 0; k < layers.size(); ++k)
    for (std::size_t i = 0; i < layers[k].size(); ++i) {
      const BatchPiece& piece = layers[k][i];
      if (piece.bytes == 0) continue;
      const MemoryKind kind = memory_kind(piece.data, piece.bytes);
      if (!is_page_locked_host(kind))
        throw std::invalid_argument(fmt::format(
            "StreamedWeights: piece {} of layer {} is marked page_locked but {} of its memory is {}: the weights are "
            "copied where they lie, from page-locked host memory (cudaHostAlloc, or cudaHostRegister / "
            "sluice::HostRegistration)", i, k, kind == MemoryKind::pageable ? "some" : "the start", to_string(kind)));
    }
}

// Free device memory, with what the device's default pool (where the slots
// are allocated) holds and no allocation uses: the slots may have it.
std::size_t free_for_slots(int device) {
  std::size_t free_bytes = 0, total_bytes = 0;
  SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  cudaMemPool_t pool = nullptr;
  SLUICE_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t reserved = 0, used = 0;
  SLUICE_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  SLUICE_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  return free_bytes + static_cast<std::size_t>(reserved > used ? reserved - used : 0);
}

}  // namespace

struct StreamedWeights::Impl {
  Impl(int device, std::vector<std::vector<BatchPiece>> layers, std::vector<ring::BatchLayout> layouts,
       weights::LayerOrder order, std::size_t ahead)
      : executor(device), ring(executor, std::move(layers), std::move(layouts), order, ahead) {}
  // The executor outlives the ring, whose end drains its lanes.
  ring::CudaRingExecutor executor;
  weights::LayerRing ring;
};

StreamedWeights::StreamedWeights(std::vector<std::vector<BatchPiece>> layers, StreamedWeightsOptions options) {
  // The host's checks first: they need no device.
  std::vector<ring::BatchLayout> layouts = weights::lay_out_layers(layers);
  const weights::LayerOrder order(layers.size(), options.backward);
  const std::size_t block = weights::largest_block(layouts);
  const std::size_t ahead = weights::choose_ahead(options, block, order.per_pass());

  const int device = options.device ? *options.device : Device::current().ordinal();
  // Fails here, with CudaError, for a device that does not exist.
  const DeviceScope scope(device);
  check_page_locked(layers);
  const std::size_t slots_bytes = (ahead + 1) * block;
  if (const std::size_t free_bytes = free_for_slots(device); slots_bytes > free_bytes)
    throw std::invalid_argument(fmt::format("StreamedWeights: {} device slots of {} bytes ({} bytes) do not fit the {} bytes "
                                            "free on device {}: give a smaller device_budget or ahead",
                                            ahead + 1, block, slots_bytes, free_bytes, device));
  impl_ = std::make_unique<Impl>(device, std::move(layers), std::move(layouts), order, ahead);
}

StreamedWeights::~StreamedWeights() = default;

StreamedWeights::Layer StreamedWeights::next(StreamView compute) {
  const auto taken = impl_->ring.next(ring::ConsumerLane{compute.get()});
  return {taken.step.layer, taken.step.backward, taken.step.pass, taken.data, taken.layout->offsets, taken.layout->bytes};
}

std::size_t StreamedWeights::ahead() const { return impl_->ring.ahead(); }
std::size_t StreamedWeights::device_bytes() const { return impl_->ring.slots() * impl_->ring.block_bytes(); }
int StreamedWeights::device() const { return impl_->executor.device(); }
void StreamedWeights::stop() noexcept { impl_->ring.stop(); }

}  // namespace sluice
