#include "stream_kernels.hpp"

#include "sluice/core/error.hpp"

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

__device__ unsigned long long mix(std::size_t i, std::int32_t input, std::int32_t target) {
  return static_cast<unsigned long long>(static_cast<std::uint32_t>(input)) * (i % 7 + 1) +
         static_cast<unsigned long long>(static_cast<std::uint32_t>(target)) * (i % 5 + 3);
}

__global__ void training_step(std::uint64_t ns, const std::int32_t* inputs, const std::int32_t* targets, std::size_t n,
                              unsigned long long* checksum) {
  std::uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    local += mix(i, inputs[i], targets[i]);
  if (local) atomicAdd(checksum, local);
}

template <typename Token>
__global__ void widen_tokens(const Token* raw, std::int32_t* inputs, std::int32_t* targets, std::size_t rows, std::size_t seq) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < rows * seq;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const Token* window = raw + (i / seq) * (seq + 1);
    inputs[i] = static_cast<std::int32_t>(window[i % seq]);
    targets[i] = static_cast<std::int32_t>(window[i % seq + 1]);
  }
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

void launch_training_step(StreamView stream, std::uint64_t ns, const std::int32_t* inputs, const std::int32_t* targets,
                          std::size_t n, unsigned long long* checksum) {
  int device = 0, sms = 0;
  SLUICE_CUDA_CHECK(cudaGetDevice(&device));
  SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  training_step<<<static_cast<unsigned>(sms), 256, 0, stream.get()>>>(ns, inputs, targets, n, checksum);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

unsigned long long batch_checksum(const std::int32_t* inputs, const std::int32_t* targets, std::size_t n) {
  unsigned long long sum = 0;
  for (std::size_t i = 0; i < n; ++i)
    sum += static_cast<unsigned long long>(static_cast<std::uint32_t>(inputs[i])) * (i % 7 + 1) +
           static_cast<unsigned long long>(static_cast<std::uint32_t>(targets[i])) * (i % 5 + 3);
  return sum;
}

void launch_widen(StreamView stream, const void* raw, std::size_t token_bytes, std::int32_t* inputs, std::int32_t* targets,
                  std::size_t rows, std::size_t seq) {
  if (rows * seq == 0) return;
  if (token_bytes == 2)
    widen_tokens<<<grid_for(rows * seq), 256, 0, stream.get()>>>(static_cast<const std::uint16_t*>(raw), inputs, targets,
                                                                 rows, seq);
  else
    widen_tokens<<<grid_for(rows * seq), 256, 0, stream.get()>>>(static_cast<const std::uint32_t*>(raw), inputs, targets,
                                                                 rows, seq);
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sluice::workloads
