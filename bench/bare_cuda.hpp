#pragma once
// What the measurements outside sluice's code (register_in_place.cu, staging_memory.cu,
// reads_beside_registered.cu) share: each is one program on the bare CUDA runtime, so that what it
// measures owes nothing to sluice.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

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

// A file to read: its bytes, and the whole pages a mapping of it spans.
struct File {
  int fd = -1;
  std::size_t bytes = 0;
  std::size_t mapped = 0;
};

// Opens `path` for reading; a file that cannot be read or is empty ends the program (status 2).
inline File open_file(const char* path) {
  File f;
  f.fd = open(path, O_RDONLY);
  struct stat st {};
  if (f.fd < 0 || fstat(f.fd, &st) != 0 || st.st_size == 0) {
    std::fprintf(stderr, "%s: cannot read %s\n", program_invocation_short_name, path);
    std::exit(2);
  }
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  f.bytes = static_cast<std::size_t>(st.st_size);
  f.mapped = (f.bytes + page - 1) / page * page;
  return f;
}

// Whether device 0 page-locks read-only memory (the page cache's own pages, through a read-only
// mapping), said on the first line of the output beside the file's size.
inline bool registers_read_only(const File& f) {
  int read_only = 0;
  check(cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, 0), "cudaDeviceGetAttribute");
  std::printf("file %.3f GB; HostRegisterReadOnlySupported %d\n", f.bytes / 1e9, read_only);
  return read_only != 0;
}

// `n` bytes of the file from `at` into `into`; false where a read failed or the file ended first.
inline bool pread_fully(int fd, char* into, std::size_t n, std::size_t at) {
  for (std::size_t done = 0; done < n;) {
    const ssize_t got = pread(fd, into + done, n - done, static_cast<off_t>(at + done));
    if (got <= 0) return false;
    done += static_cast<std::size_t>(got);
  }
  return true;
}

// One lane of sluice's file reader written bare: a stream, and `slot_count` page-locked slots of
// `chunk` bytes from `slots`. For each chunk `take()` hands it ({file offset, bytes}; no bytes: none
// left), it preads the file's bytes into its next slot (after that slot's last copy) and copies
// them to device + offset. A read that fails sets `failed` and ends the lane.
template <class Take>
void read_lane(int fd, char* device, char* slots, int slot_count, std::size_t chunk, Take take,
               std::atomic<bool>& failed) {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<cudaEvent_t> copied(slot_count);
  for (auto& e : copied) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  std::vector<bool> used(slot_count, false);
  for (std::size_t k = 0;; ++k) {
    const auto [at, n] = take();
    if (n == 0) break;
    const int slot = static_cast<int>(k % slot_count);
    if (used[slot]) check(cudaEventSynchronize(copied[slot]), "cudaEventSynchronize");
    char* into = slots + slot * chunk;
    if (!pread_fully(fd, into, n, at)) {
      failed = true;
      break;  // the slot is not the file's: not copied
    }
    check(cudaMemcpyAsync(device + at, into, n, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    check(cudaEventRecord(copied[slot], s), "cudaEventRecord");
    used[slot] = true;
  }
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  for (auto& e : copied) check(cudaEventDestroy(e), "cudaEventDestroy");
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
}

// The file's bytes read once front to back: into the page cache, where they were not.
inline void warm_page_cache(int fd, std::size_t bytes) {
  std::vector<char> buffer(std::size_t{8} << 20);
  for (std::size_t at = 0; at < bytes;) {
    const ssize_t n = pread(fd, buffer.data(), buffer.size(), static_cast<off_t>(at));
    if (n <= 0) break;
    at += static_cast<std::size_t>(n);
  }
}

// The file, read once with plain preads and copied to the GPU: what every run is compared with.
inline char* reference_copy(int fd, std::size_t bytes) {
  char* device = nullptr;
  check(cudaMalloc(&device, bytes), "cudaMalloc");
  std::vector<char> piece(std::size_t{64} << 20);
  for (std::size_t at = 0; at < bytes; at += piece.size()) {
    const std::size_t n = std::min(piece.size(), bytes - at);
    if (pread(fd, piece.data(), n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) {
      std::fprintf(stderr, "%s: cannot read the file\n", program_invocation_short_name);
      std::exit(1);
    }
    check(cudaMemcpy(device + at, piece.data(), n, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  return device;
}

static __global__ void count_differences(const unsigned char* got, const unsigned char* want, std::size_t bytes,
                                         unsigned long long* differences) {
  const std::size_t step = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < bytes; i += step)
    if (got[i] != want[i]) atomicAdd(differences, 1ull);
}

// Whether `bytes` of `device` equal the reference, counted on the GPU into `differences` (device memory).
inline bool same_as(const char* device, const char* reference, std::size_t bytes, unsigned long long* differences) {
  check(cudaMemset(differences, 0, sizeof *differences), "cudaMemset");
  count_differences<<<1024, 256>>>(reinterpret_cast<const unsigned char*>(device),
                                   reinterpret_cast<const unsigned char*>(reference), bytes, differences);
  check(cudaGetLastError(), "count_differences");
  unsigned long long n = 0;
  check(cudaMemcpy(&n, differences, sizeof n, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return n == 0;
}

}  // namespace bare
