#include "stream_kernels.hpp"

#include "sluice/error.hpp"

namespace sluice::workloads {

namespace {

__global__ void sum_kernel(const float* __restrict__ x, std::size_t n, double* total) {
  double local = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    local += x[i];
  // Warp, then block, then one atomic per block.
  for (int offset = 16; offset > 0; offset /= 2) local += __shfl_down_sync(0xffffffffu, local, offset);
  __shared__ double warps[32];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = local;
  __syncthreads();
  if (threadIdx.x < 32) {
    local = threadIdx.x < blockDim.x / 32 ? warps[threadIdx.x] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) local += __shfl_down_sync(0xffffffffu, local, offset);
    if (threadIdx.x == 0) atomicAdd(total, local);
  }
}

__global__ void affine_kernel(const float* __restrict__ x, float* __restrict__ y, std::size_t n, float scale,
                              float offset) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    y[i] = x[i] * scale + offset;
}

unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 2048 ? blocks : 2048);
}

}  // namespace

void launch_sum(StreamView stream, const float* x, std::size_t n, double* total) {
  if (n == 0) return;
  sum_kernel<<<grid_for(n), 256, 0, stream.get()>>>(x, n, total);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

void launch_affine(StreamView stream, const float* x, float* y, std::size_t n, float scale, float offset) {
  if (n == 0) return;
  affine_kernel<<<grid_for(n), 256, 0, stream.get()>>>(x, y, n, scale, offset);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sluice::workloads
