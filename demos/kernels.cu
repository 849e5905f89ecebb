#include "kernels.hpp"

#include "sluice/core/error.hpp"

namespace sluice::demo {

namespace {

// Nanoseconds on the GPU's global timer: one clock for every SM.
__device__ std::uint64_t global_ns() {
  std::uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

__global__ void sleep_kernel(std::uint64_t ns, std::uint64_t* start, std::uint64_t* end, int* done) {
  const std::uint64_t begin = global_ns();
  while (global_ns() - begin < ns) {}
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    if (start) *start = begin;
    if (end) *end = global_ns();
    if (done) *done = 1;
  }
}

__global__ void affine_kernel(const float* x, float* y, std::size_t n, float scale, float offset) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    y[i] = x[i] * scale + offset;
}

__global__ void delayed_fill_kernel(std::uint64_t ns, int* data, std::size_t n, int value) {
  const std::uint64_t begin = global_ns();
  while (global_ns() - begin < ns) {}
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    data[i] = value;
}

__global__ void copy_kernel(const int* src, int* dst, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks == 0 ? 1 : blocks < 4096 ? blocks : 4096);
}

}  // namespace

void launch_sleep(StreamView stream, std::uint64_t ns, std::uint64_t* start, std::uint64_t* end, int* done,
                  unsigned blocks, unsigned threads) {
  sleep_kernel<<<blocks, threads, 0, stream.get()>>>(ns, start, end, done);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

void launch_affine(StreamView stream, const float* x, float* y, std::size_t n, float scale, float offset) {
  affine_kernel<<<grid_for(n), 256, 0, stream.get()>>>(x, y, n, scale, offset);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

void launch_delayed_fill(StreamView stream, std::uint64_t ns, int* data, std::size_t n, int value) {
  // One block: the producer leaves the other SMs free, as a small real producer would.
  delayed_fill_kernel<<<1, 256, 0, stream.get()>>>(ns, data, n, value);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

void launch_copy_ints(StreamView stream, const int* src, int* dst, std::size_t n) {
  copy_kernel<<<grid_for(n), 256, 0, stream.get()>>>(src, dst, n);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sluice::demo
