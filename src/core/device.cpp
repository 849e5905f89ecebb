#include "sluice/core/device.hpp"

#include <cuda_runtime_api.h>

#include <stdexcept>

#include "pcie_link.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/host_fn.hpp"

namespace sluice {

Device::Device(int ordinal) : ordinal_(ordinal) {
  int devices = 0;
  SLUICE_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (ordinal < 0 || ordinal >= devices)
    throw std::invalid_argument("device " + std::to_string(ordinal) + " does not exist (" + std::to_string(devices) +
                                " device(s) present)");
}

int Device::count() noexcept {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    (void)cudaGetLastError();  // clear, so the failure does not stick to later calls
    return 0;
  }
  return devices;
}

std::string Device::unavailable_reason() {
  int devices = 0;
  const cudaError_t code = cudaGetDeviceCount(&devices);
  (void)cudaGetLastError();
  if (code != cudaSuccess) return std::string(cudaGetErrorName(code)) + ": " + cudaGetErrorString(code);
  if (devices == 0) return "the CUDA driver reports no device";
  return {};
}

Device Device::current() {
  int ordinal = 0;
  SLUICE_CUDA_CHECK(cudaGetDevice(&ordinal));
  return Device(ordinal);
}

void Device::make_current() const { SLUICE_CUDA_CHECK(cudaSetDevice(ordinal_)); }

DeviceInfo Device::info() const {
  cudaDeviceProp prop{};
  SLUICE_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
  DeviceInfo info;
  info.ordinal = ordinal_;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.async_engine_count = prop.asyncEngineCount;
  info.concurrent_kernels = prop.concurrentKernels != 0;
  info.unified_addressing = prop.unifiedAddressing != 0;
  info.can_map_host_memory = prop.canMapHostMemory != 0;
  info.total_memory_bytes = prop.totalGlobalMem;
  info.l2_cache_bytes = static_cast<std::size_t>(prop.l2CacheSize);

  int previous = 0;
  SLUICE_CUDA_CHECK(cudaGetDevice(&previous));
  SLUICE_CUDA_CHECK(cudaSetDevice(ordinal_));
  std::size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t mem = cudaMemGetInfo(&free_bytes, &total_bytes);
  const cudaError_t prio = cudaDeviceGetStreamPriorityRange(&info.least_stream_priority, &info.greatest_stream_priority);
  SLUICE_CUDA_CHECK(cudaSetDevice(previous));
  SLUICE_CUDA_CHECK(mem);
  SLUICE_CUDA_CHECK(prio);
  info.free_memory_bytes = free_bytes;

  char bus_id[32] = {};
  SLUICE_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, ordinal_));
  info.pci_bus_id = bus_id;
  info.pcie_link = read_pcie_link(info.pci_bus_id);
  return info;
}

void Device::synchronize() const {
  int previous = 0;
  SLUICE_CUDA_CHECK(cudaGetDevice(&previous));
  SLUICE_CUDA_CHECK(cudaSetDevice(ordinal_));
  const cudaError_t code = cudaDeviceSynchronize();
  SLUICE_CUDA_CHECK(cudaSetDevice(previous));
  SLUICE_CUDA_CHECK(code);
  rethrow_any_host_fn_error();
}

}  // namespace sluice
