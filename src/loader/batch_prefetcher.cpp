// sluice::BatchPrefetcher: the ring's prefetcher (ring/batch_prefetcher.hpp)
// on a GPU's ring executor, behind the public header's types.
#include "sluice/loader/batch_prefetcher.hpp"

#include "ring/batch_prefetcher.hpp"
#include "ring/cuda_ring_executor.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/device_scope.hpp"

namespace sluice {

namespace {

int resolve(const std::optional<int>& device) { return device ? *device : Device::current().ordinal(); }

// The ring's error, in the public type: users cannot name ring::RingError.
template <typename F>
auto translated(F&& f) {
  try {
    return f();
  } catch (const ring::RingError& e) {
    throw BatchError(e.position(), e.what());
  }
}

}  // namespace

struct BatchPrefetcher::Impl {
  Impl(int device, const BatchPrefetchOptions& o)
      : executor(device), prefetcher(executor, {o.ahead, o.held, o.threads, o.staging, o.align}) {}
  // The executor outlives the prefetcher, whose end drains its lanes.
  ring::CudaRingExecutor executor;
  ring::BatchPrefetcher prefetcher;
};

BatchPrefetcher::BatchPrefetcher(BatchPrefetchOptions options) {
  const int device = resolve(options.device);
  // Fails here, with CudaError, for a device that does not exist.
  const DeviceScope scope(device);
  impl_ = std::make_unique<Impl>(device, options);
}

BatchPrefetcher::~BatchPrefetcher() = default;

std::size_t BatchPrefetcher::put(std::span<const BatchPiece> pieces) {
  std::vector<ring::HostPiece> host;
  host.reserve(pieces.size());
  for (const BatchPiece& p : pieces) host.push_back({static_cast<const std::byte*>(p.data), p.bytes, p.page_locked, p.fd, p.fd_offset});
  return impl_->prefetcher.put(host);
}

void BatchPrefetcher::close() { impl_->prefetcher.close(); }
void BatchPrefetcher::fail(const std::string& what) { impl_->prefetcher.fail(what); }
bool BatchPrefetcher::copied(std::size_t position) const { return impl_->prefetcher.copied(position); }

std::optional<DeviceBatch> BatchPrefetcher::next(StreamView consumer) {
  auto b = translated([&] { return impl_->prefetcher.next(ring::ConsumerLane{consumer.get()}); });
  if (!b) return std::nullopt;
  return DeviceBatch{b->position, b->data, std::move(b->offsets), b->bytes, std::move(b->memory)};
}

void BatchPrefetcher::keep(std::size_t position) { impl_->prefetcher.keep(position); }
void BatchPrefetcher::stop() noexcept { impl_->prefetcher.stop(); }

}  // namespace sluice
