#pragma once
// What the measurements outside sluice's code (register_in_place.cu, staging_memory.cu) share:
// each is one program on the bare CUDA runtime, so that what it measures owes nothing to sluice.
#include <cuda_runtime.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace bare {

// A CUDA call that failed ends the program, saying which and why.
inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s failed: %s\n", program_invocation_short_name, what, cudaGetErrorString(e));
  std::exit(1);
}

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// GB/s of pinned host-to-device copies of 256 MiB, eight back to back after one to warm up: the link alone.
inline double link_alone() {
  constexpr std::size_t bytes = std::size_t{256} << 20;
  void* host = nullptr;
  void* device = nullptr;
  check(cudaMallocHost(&host, bytes), "cudaMallocHost");
  check(cudaMalloc(&device, bytes), "cudaMalloc");
  std::memset(host, 1, bytes);
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const auto t = Clock::now();
  for (int i = 0; i < 8; ++i) check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const double rate = 8.0 * bytes / seconds_since(t) / 1e9;
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  check(cudaFreeHost(host), "cudaFreeHost");
  check(cudaFree(device), "cudaFree");
  return rate;
}

}  // namespace bare
