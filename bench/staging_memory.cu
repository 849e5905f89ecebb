// staging_memory FILE [cuda_host|huge|small]: does the kind of page-locked memory a file is read
// into decide how fast a file in the page cache reaches the GPU?
//
// sluice.load_file's lanes pread each chunk into a staging slot (a page-locked buffer of its own
// from the CUDA runtime) and copy it to the GPU from there. This program runs the same lanes bare
// (a thread and a stream each, two slots a lane, the next chunk taken from one counter) over the
// slots of one block of each of three kinds: cudaMallocHost; anonymous memory the kernel backs
// with 2 MiB pages (madvise MADV_HUGEPAGE) page-locked with cudaHostRegister; and the same with
// 4 KiB pages (MADV_NOHUGEPAGE), which tells the page size apart from the allocator. Each run's
// time includes making its threads, streams and events, as a read through sluice includes making
// its lanes. Beside them: the link alone. Every run is compared with the file byte for byte on
// the GPU. docs/measurements.md ("Smaller chunks, huge pages, and bare lanes") has what it found.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bare_cuda.hpp"

namespace {

using bare::check;
using bare::Clock;
using bare::seconds_since;

enum class Kind { cuda_host, huge_registered, small_registered };
const char* name(Kind k) {
  switch (k) {
    case Kind::cuda_host: return "cudaMallocHost";
    case Kind::huge_registered: return "2 MiB pages, registered";
    default: return "4 KiB pages, registered";
  }
}

constexpr std::size_t huge = std::size_t{2} << 20;

// Page-locked memory of `bytes` (a multiple of 2 MiB) of the given kind; `mapped` is what to unmap.
struct Staging {
  char* data = nullptr;
  void* mapped = nullptr;  // the mapping, from up to 2 MiB below data (null: from cudaMallocHost)
  std::size_t mapped_bytes = 0;
};

Staging staging(Kind kind, std::size_t bytes) {
  Staging s;
  if (kind == Kind::cuda_host) {
    void* p = nullptr;
    check(cudaMallocHost(&p, bytes), "cudaMallocHost");
    s.data = static_cast<char*>(p);
    return s;
  }
  // Mapped with a spare 2 MiB so that the memory used starts on a 2 MiB boundary (a huge page's).
  s.mapped_bytes = bytes + huge;
  s.mapped = mmap(nullptr, s.mapped_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (s.mapped == MAP_FAILED) { std::perror("mmap"); std::exit(1); }
  s.data = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(s.mapped) + huge - 1) / huge * huge);
  const int advice = kind == Kind::huge_registered ? MADV_HUGEPAGE : MADV_NOHUGEPAGE;
  if (madvise(s.data, bytes, advice) != 0) std::perror("madvise");
  std::memset(s.data, 0, bytes);  // faulted in: with MADV_HUGEPAGE, as 2 MiB pages where the kernel has them
  check(cudaHostRegister(s.data, bytes, cudaHostRegisterDefault), "cudaHostRegister");
  return s;
}

void release(const Staging& s) {
  if (!s.mapped) {
    check(cudaFreeHost(s.data), "cudaFreeHost");
    return;
  }
  check(cudaHostUnregister(s.data), "cudaHostUnregister");
  munmap(s.mapped, s.mapped_bytes);
}

// kB of anonymous memory in huge pages in this process (/proc/self/smaps_rollup), -1 where unknown.
long anon_huge_kb() {
  std::ifstream in("/proc/self/smaps_rollup");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("AnonHugePages:", 0) == 0) return std::atol(line.c_str() + 14);
  return -1;
}

// The file onto the GPU by `lanes` threads, each with `slots` staging slots of `chunk` bytes and a
// stream: pread the next chunk into the next slot (after that slot's last copy), copy it. Seconds.
double read_onto_gpu(int fd, std::size_t bytes, char* device, char* slots_memory, int lanes, int slots,
                     std::size_t chunk) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  const auto started = Clock::now();
  std::vector<std::thread> threads;
  for (int lane = 0; lane < lanes; ++lane) {
    const auto take = [&] {
      const std::size_t at = next.fetch_add(chunk);
      return std::pair{at, at < bytes ? std::min(chunk, bytes - at) : 0};
    };
    threads.emplace_back([&, lane, take] {
      bare::read_lane(fd, device, slots_memory + static_cast<std::size_t>(lane) * slots * chunk, slots, chunk, take,
                      failed);
    });
  }
  for (auto& t : threads) t.join();
  if (failed) {
    std::fprintf(stderr, "staging_memory: a read failed\n");
    std::exit(1);
  }
  return seconds_since(started);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc == 3 ? argv[2] : "";
  if ((argc != 2 && argc != 3) || (argc == 3 && only != "cuda_host" && only != "huge" && only != "small")) {
    std::fprintf(stderr, "usage: staging_memory FILE [cuda_host|huge|small]  (a file of a few GB; it is read into "
                         "the page cache first; the kind of staging memory, every kind if not given)\n");
    return 2;
  }
  const bare::File file = bare::open_file(argv[1]);
  const int fd = file.fd;
  const std::size_t bytes = file.bytes;
  {
    std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string setting;
    std::getline(thp, setting);
    std::printf("file %.3f GB; transparent huge pages: %s\n", bytes / 1e9, setting.c_str());
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  bare::warm_page_cache(fd, bytes);
  char* device = nullptr;
  check(cudaMalloc(&device, bytes), "cudaMalloc");
  char* reference = bare::reference_copy(fd, bytes);
  unsigned long long* differences = nullptr;
  check(cudaMalloc(&differences, sizeof *differences), "cudaMalloc");
  std::printf("link alone: %.1f GB/s\n", bare::link_alone());
  std::printf("%-26s %9s %6s %6s %9s %8s %10s  %s\n", "staging", "chunk MiB", "slots", "lanes", "median ms", "GB/s",
              "huge kB", "verified");
  constexpr int lanes_max = 16, slots_max = 2;
  for (Kind kind : {Kind::cuda_host, Kind::huge_registered, Kind::small_registered}) {
    const char* argument = kind == Kind::cuda_host ? "cuda_host" : kind == Kind::huge_registered ? "huge" : "small";
    if (!only.empty() && only != argument) continue;
    const std::size_t chunk_max = std::size_t{4} << 20;
    const std::size_t slots_bytes = lanes_max * slots_max * chunk_max;
    const Staging slots = staging(kind, slots_bytes);
    const long huge_kb = anon_huge_kb();
    for (std::size_t chunk_mib : {1, 2, 4})
      for (int lanes : {8, 12, 16}) {
        std::vector<double> runs;
        bool verified = true;
        for (int run = 0; run < 4; ++run) {
          check(cudaMemset(device, 0xA5, bytes), "cudaMemset");  // poisoned: a chunk not copied shows
          check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
          const double s = read_onto_gpu(fd, bytes, device, slots.data, lanes, slots_max, chunk_mib << 20);
          if (run > 0) runs.push_back(s);  // the first warms the lanes' paths
          verified = verified && bare::same_as(device, reference, bytes, differences);
        }
        std::sort(runs.begin(), runs.end());
        const double median = runs[runs.size() / 2];
        std::printf("%-26s %9zu %6d %6d %9.1f %8.1f %10ld  %s\n", name(kind), chunk_mib, slots_max, lanes, median * 1e3,
                    bytes / median / 1e9, huge_kb, verified ? "bitwise" : "MISMATCH");
        std::fflush(stdout);
      }
    release(slots);
  }
  check(cudaFree(device), "cudaFree");
  check(cudaFree(reference), "cudaFree");
  check(cudaFree(differences), "cudaFree");
  return 0;
}
