#include "model_kernels.hpp"

#include "sluice/core/error.hpp"

namespace sluice::demo {

namespace {

// `iterations` dependent FMAs from a seed; the result is 1 for no input the
// kernels see (the seed is in [0, 1) and the chain contracts towards 0.25), but
// the compiler cannot know that, so the work stays.
__device__ float busy_work(float seed, std::uint32_t iterations) {
  float v = seed;
  for (std::uint32_t k = 0; k < iterations; ++k) v = fmaf(v, 0.5f, 0.125f);
  return v == 1234.5f ? 1.0f : 0.0f;
}

__global__ void costly_affine_kernel(const float* x, const float* z, float* y, std::size_t n, float a, float b,
                                     float c, std::uint32_t iterations) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float extra = busy_work(static_cast<float>(i & 1023) / 1024.0f, iterations);
    y[i] = a * x[i] + (z ? b * z[i] : 0.0f) + c + extra;
  }
}

__global__ void costly_gradient_kernel(float* grad, std::size_t n, int rank, int layer, std::uint32_t iterations) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    grad[i] = gradient_value(rank, layer, i) + busy_work(static_cast<float>(i & 1023) / 1024.0f, iterations);
}

unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks == 0 ? 1 : blocks < 8192 ? blocks : 8192);
}

}  // namespace

void launch_costly_affine(StreamView stream, const float* x, const float* z, float* y, std::size_t n, float a, float b,
                          float c, std::uint32_t iterations) {
  costly_affine_kernel<<<grid_for(n), 256, 0, stream.get()>>>(x, z, y, n, a, b, c, iterations);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

void launch_costly_gradient(StreamView stream, float* grad, std::size_t n, int rank, int layer,
                            std::uint32_t iterations) {
  costly_gradient_kernel<<<grid_for(n), 256, 0, stream.get()>>>(grad, n, rank, layer, iterations);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sluice::demo
