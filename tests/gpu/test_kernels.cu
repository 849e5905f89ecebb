#include "test_kernels.cuh"

#include "sluice/core/error.hpp"

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
__global__ void late_affine(long long cycles, const float* in, float* out, std::size_t n, float scale, float offset) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    out[i] = in[i] * scale + offset;
}
__global__ void running_sum(const std::int64_t* in, std::int64_t* out, std::size_t n, std::int64_t* carry) {
  std::int64_t c = *carry;
  for (std::size_t i = 0; i < n; ++i) out[i] = c += in[i];
  *carry = c;
}
__global__ void accumulate(const int* in, std::size_t n, unsigned long long* total) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    atomicAdd(total, static_cast<unsigned long long>(in[i]));
}
unsigned blocks(std::size_t n) { return static_cast<unsigned>(n == 0 ? 1 : (n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024); }
long long cycles_for(double microseconds) {
  int device = 0, khz = 0;
  SLUICE_CUDA_CHECK(cudaGetDevice(&device));
  SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
  return static_cast<long long>(microseconds * khz / 1000.0);
}
}  // namespace

void launch_spin_then_write(StreamView stream, double microseconds, int* flag, int value) {
  spin_then_write<<<1, 1, 0, stream.get()>>>(cycles_for(microseconds), flag, value);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

void launch_copy_word(StreamView stream, const int* from, int* to) {
  copy_word<<<1, 1, 0, stream.get()>>>(from, to);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

void launch_iota(StreamView stream, float* out, std::size_t n, float scale, float offset) {
  if (n == 0) return;
  iota<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream.get()>>>(out, n, scale, offset);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

void launch_affine(StreamView stream, const float* in, float* out, std::size_t n, float scale, float offset) {
  if (n == 0) return;
  late_affine<<<blocks(n), 256, 0, stream.get()>>>(0, in, out, n, scale, offset);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

void launch_late_affine(StreamView stream, double microseconds, const float* in, float* out, std::size_t n, float scale,
                        float offset) {
  late_affine<<<blocks(n), 256, 0, stream.get()>>>(cycles_for(microseconds), in, out, n, scale, offset);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

void launch_running_sum(StreamView stream, const std::int64_t* in, std::int64_t* out, std::size_t n, std::int64_t* carry) {
  running_sum<<<1, 1, 0, stream.get()>>>(in, out, n, carry);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

void launch_accumulate(StreamView stream, const int* in, std::size_t n, unsigned long long* total) {
  if (n == 0) return;
  accumulate<<<blocks(n), 256, 0, stream.get()>>>(in, n, total);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sluice::test
