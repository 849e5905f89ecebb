#include "test_kernels.cuh"

#include "sluice/error.hpp"

namespace sluice::test {

namespace {
__global__ void spin_then_write(long long cycles, int* flag, int value) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
  *flag = value;
}
__global__ void copy_word(const int* from, int* to) { *to = *from; }
__global__ void iota(float* out, std::size_t n, float scale, float offset) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(i) * scale + offset;
}
}  // namespace

void launch_spin_then_write(StreamView stream, double microseconds, int* flag, int value) {
  int device = 0, khz = 0;
  SLUICE_CUDA_CHECK(cudaGetDevice(&device));
  SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
  const auto cycles = static_cast<long long>(microseconds * khz / 1000.0);
  spin_then_write<<<1, 1, 0, stream.get()>>>(cycles, flag, value);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

void launch_copy_word(StreamView stream, const int* from, int* to) {
  copy_word<<<1, 1, 0, stream.get()>>>(from, to);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

void launch_iota(StreamView stream, float* out, std::size_t n, float scale, float offset) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  iota<<<blocks, 256, 0, stream.get()>>>(out, n, scale, offset);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sluice::test
