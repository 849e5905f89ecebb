#include "sluice/core/device_scope.hpp"

#include <cuda_runtime_api.h>

#include "sluice/core/error.hpp"

namespace sluice {

DeviceScope::DeviceScope(int device) {
  SLUICE_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    SLUICE_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}

DeviceScope::~DeviceScope() {
  if (changed_) SLUICE_CUDA_CHECK_NOTHROW(cudaSetDevice(previous_));
}

}  // namespace sluice
