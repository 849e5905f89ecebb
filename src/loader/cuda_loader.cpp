#include "loader/cuda_loader.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "core/host_memory.hpp"
#include "sluice/core/byte_size.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/error.hpp"

namespace sluice::detail {

namespace {

int least_priority(int device) {
  const DeviceScope scope(device);
  int least = 0, greatest = 0;
  SLUICE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return least;
}

void check_memory(const ring::RingPlan& plan, int device) {
  const DeviceScope scope(device);
  const std::size_t slots = plan.slots(), device_bytes = plan.device_slot_bytes();
  std::size_t free_bytes = 0, total = 0;
  SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  if (device_bytes > free_bytes / slots)
    throw std::invalid_argument("loader: " + std::to_string(slots) + " batches of " + format_bytes(device_bytes) +
                                " on the device need " + format_bytes(slots * device_bytes) + ", but only " +
                                format_bytes(free_bytes) + " are free: use a smaller batch, sequence or `ahead`");
  const std::size_t pinned = plan.staging_slots(), host_bytes = plan.slot_bytes();
  if (const std::size_t available = available_host_memory(); available > 0 && host_bytes > available / 2 / pinned)
    throw std::invalid_argument("loader: " + format_bytes(pinned * host_bytes) +
                                " of pinned slots would take over half the host's available " + format_bytes(available));
}

}  // namespace

CudaLoader::CudaLoader(BatchPlan plan, LoaderSource source, const LoaderOptions& options) {
  const int device = options.device ? *options.device : Device::current().ordinal();
  check_memory(ring::RingPlan(LoaderRing::ring_options(plan, source, options.ahead)), device);
  executor_ = std::make_unique<ring::CudaRingExecutor>(device, least_priority(device));
  ring_ = std::make_unique<LoaderRing>(std::move(plan), std::move(source), *executor_, options);
}

CudaLoader::~CudaLoader() { ring_.reset(); }

}  // namespace sluice::detail
