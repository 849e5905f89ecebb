#include "sluice/weights/checkpoint.hpp"

#include <cuda_runtime_api.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ring/cuda_ring_executor.hpp"
#include "sluice/core/device.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/error.hpp"
#include "weights/checkpoint_read.hpp"
#include "weights/safetensors_header.hpp"

namespace sluice {

namespace {

int device_of(const CheckpointOptions& o) {
  // Device(n): std::invalid_argument for one that does not exist.
  return (o.device ? Device(*o.device) : Device::current()).ordinal();
}

// `bytes` of device memory on `device`, freed there by the last holder, from any
// thread whatever device is current there.
std::shared_ptr<std::byte> allocate_on(int device, std::size_t bytes) {
  const DeviceScope scope(device);
  void* raw = nullptr;
  SLUICE_CUDA_CHECK(cudaMalloc(&raw, bytes));
  return {static_cast<std::byte*>(raw), [device](std::byte* p) noexcept {
            // A deleter must not throw: the device is set and restored by hand, failures reported.
            int was = -1;
            (void)cudaGetDevice(&was);
            if (was != device) SLUICE_CUDA_CHECK_NOTHROW(cudaSetDevice(device));
            SLUICE_CUDA_CHECK_NOTHROW(cudaFree(p));
            if (was >= 0 && was != device) SLUICE_CUDA_CHECK_NOTHROW(cudaSetDevice(was));
          }};
}

}  // namespace

const CheckpointTensor& Checkpoint::at(std::string_view name) const {
  for (const CheckpointTensor& t : tensors)
    if (t.name == name) return t;
  throw std::out_of_range("checkpoint: no tensor named '" + std::string(name) + "'");
}

Checkpoint load_checkpoint(const std::filesystem::path& path, const CheckpointOptions& options) {
  weights::check(options);
  const weights::SafetensorsHeader header = weights::read_safetensors_header(path.string());
  const int device = device_of(options);

  Checkpoint out;
  out.memory = CheckpointMemory({}, 0, device);
  out.metadata = header.metadata;
  for (const weights::TensorEntry& e : header.tensors)
    out.tensors.push_back({e.name, std::string(weights::to_string(e.dtype)), e.shape, e.begin - header.data_begin,
                           e.bytes()});
  const std::uint64_t data_bytes = header.file_bytes - header.data_begin;
  if (data_bytes == 0) return out;  // no tensors, or none with an element: nothing to read or allocate

  // cudaMalloc, not a stream-ordered allocation: the memory is the caller's
  // from any thread and any stream, and its free needs its device only.
  // Tensors lie end to end: one allocation holds them all, each where the file has it.
  std::shared_ptr<std::byte> memory = allocate_on(device, data_bytes);
  std::vector<std::byte*> into;
  for (const CheckpointTensor& t : out.tensors) into.push_back(memory.get() + t.offset);
  weights::read_checkpoint(path, header, into, options, [device](std::size_t) {
    return std::make_shared<ring::CudaRingExecutor>(device, 0, ring::file_read_staging_wait);
  });
  out.memory = CheckpointMemory(std::move(memory), data_bytes, device);
  return out;
}

}  // namespace sluice
