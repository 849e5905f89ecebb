// register_in_place FILE: can a file in the page cache reach the GPU without the CPU's copy?
//
// sluice.load_file preads each chunk into a page-locked staging slot that the DMA then reads, so
// host memory carries the file three times. This program measures the path that skips the copy:
// the file mapped read-only, its page-cache pages page-locked where they are
// (cudaHostRegisterReadOnly), copied to the GPU from there and unregistered - as the whole file in
// turn, and in pieces that threads register while others copy. Beside it: the link alone. Every
// copied run is compared with the file byte for byte. docs/measurements.md has what it found.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "bare_cuda.hpp"

namespace {

using bare::check;
using bare::File;
using bare::Clock;
using bare::seconds_since;

// A read-only shared mapping of the whole file: its pages are the page cache's own.
char* map(const File& f) {
  void* m = mmap(nullptr, f.mapped, PROT_READ, MAP_SHARED, f.fd, 0);
  if (m == MAP_FAILED) { std::perror("mmap"); std::exit(1); }
  return static_cast<char*>(m);
}

bool same_as_file(const char* mapping, const char* device, std::size_t bytes) {
  std::vector<char> back(std::size_t{64} << 20);
  for (std::size_t at = 0; at < bytes; at += back.size()) {
    const std::size_t n = std::min(back.size(), bytes - at);
    check(cudaMemcpy(back.data(), device + at, n, cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (std::memcmp(back.data(), mapping + at, n) != 0) return false;
  }
  return true;
}

// Threads take the next piece from one counter, register it, copy it on a stream of their own,
// and unregister a piece once its copy is done, `depth` pieces in flight a thread.
void pieces(const File& f, char* device, int threads, std::size_t piece, bool copy, int depth) {
  char* mapping = map(f);
  check(cudaMemset(device, 0xA5, f.mapped), "cudaMemset");  // poisoned: a copy that did not happen shows
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::atomic<std::size_t> next{0};
  std::atomic<long long> register_ns{0}, unregister_ns{0};
  const auto started = Clock::now();
  std::vector<std::thread> lanes;
  for (int k = 0; k < threads; ++k) {
    lanes.emplace_back([&] {
      cudaStream_t s;
      check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
      std::deque<std::pair<char*, cudaEvent_t>> in_flight;
      auto retire = [&] {
        auto [at, done] = in_flight.front();
        in_flight.pop_front();
        check(cudaEventSynchronize(done), "cudaEventSynchronize");
        check(cudaEventDestroy(done), "cudaEventDestroy");
        const auto t = Clock::now();
        check(cudaHostUnregister(at), "cudaHostUnregister");
        unregister_ns += static_cast<long long>(seconds_since(t) * 1e9);
      };
      for (std::size_t at; (at = next.fetch_add(piece)) < f.mapped;) {
        const std::size_t n = std::min(piece, f.mapped - at);
        const auto t = Clock::now();
        check(cudaHostRegister(mapping + at, n, cudaHostRegisterReadOnly), "cudaHostRegister");
        register_ns += static_cast<long long>(seconds_since(t) * 1e9);
        if (copy && at < f.bytes)
          check(cudaMemcpyAsync(device + at, mapping + at, std::min(n, f.bytes - at), cudaMemcpyHostToDevice, s),
                "cudaMemcpyAsync");
        cudaEvent_t done;
        check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
        check(cudaEventRecord(done, s), "cudaEventRecord");
        in_flight.emplace_back(mapping + at, done);
        if (static_cast<int>(in_flight.size()) >= depth) retire();
      }
      while (!in_flight.empty()) retire();
      check(cudaStreamDestroy(s), "cudaStreamDestroy");
    });
  }
  for (auto& lane : lanes) lane.join();
  const double elapsed = seconds_since(started);
  const char* verdict = copy ? (same_as_file(mapping, device, f.bytes) ? "  verified" : "  MISMATCH") : "";
  munmap(mapping, f.mapped);
  std::printf("%-9s threads %2d, pieces of %3zu MiB, %d in flight: %7.1f ms %6.1f GB/s "
              "(register %.0f, unregister %.0f thread-ms)%s\n",
              copy ? "reg+copy" : "reg only", threads, piece >> 20, depth, elapsed * 1e3, f.bytes / elapsed / 1e9,
              register_ns.load() / 1e6, unregister_ns.load() / 1e6, verdict);
}

void whole_file(const File& f, char* device) {
  char* mapping = map(f);
  check(cudaMemset(device, 0xA5, f.mapped), "cudaMemset");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  auto t = Clock::now();
  check(cudaHostRegister(mapping, f.mapped, cudaHostRegisterReadOnly), "cudaHostRegister");
  const double registered = seconds_since(t);
  t = Clock::now();
  check(cudaMemcpy(device, mapping, f.bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  const double copied = seconds_since(t);
  t = Clock::now();
  check(cudaHostUnregister(mapping), "cudaHostUnregister");
  const double unregistered = seconds_since(t);
  const char* verdict = same_as_file(mapping, device, f.bytes) ? "verified" : "MISMATCH";
  munmap(mapping, f.mapped);
  std::printf("whole file: register %.1f ms (%.1f GB/s), copy %.1f ms (%.1f GB/s), unregister %.1f ms; %s\n",
              registered * 1e3, f.bytes / registered / 1e9, copied * 1e3, f.bytes / copied / 1e9, unregistered * 1e3,
              verdict);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: register_in_place FILE  (a file of a few GB; it is read into the page cache first)\n");
    return 2;
  }
  const File f = bare::open_file(argv[1]);
  check(cudaSetDevice(0), "cudaSetDevice");
  if (!bare::registers_read_only(f)) return 1;
  bare::warm_page_cache(f.fd, f.bytes);
  char* device = nullptr;
  check(cudaMalloc(&device, f.mapped), "cudaMalloc");
  std::printf("link alone: %.1f GB/s\n", bare::link_alone());
  for (int threads : {1, 4, 8}) pieces(f, device, threads, std::size_t{64} << 20, false, 1);
  for (std::size_t mib : {16, 64, 256})
    for (int threads : {1, 2, 4, 8, 12}) pieces(f, device, threads, mib << 20, true, 2);
  pieces(f, device, 4, std::size_t{64} << 20, true, 3);
  pieces(f, device, 8, std::size_t{32} << 20, true, 3);
  whole_file(f, device);
  check(cudaFree(device), "cudaFree");
  return 0;
}
