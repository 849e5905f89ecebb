// reads_beside_registered FILE: can part of a file in the page cache skip the CPU's copy, so that
// host memory carries those bytes once instead of three times, while the reader's lanes carry the rest?
//
// sluice.load_file's lanes pread each chunk into a page-locked staging slot that the DMA then
// reads: host memory carries each byte three times (the page cache read, the slot written, the
// slot read). Page-locking the page cache's own pages in place skips two of the three, but costs
// about as much CPU time as the copy (register_in_place.cu). Here both run at once: lanes as in
// staging_memory.cu (a thread, a stream and two cudaMallocHost slots each) take chunks from the
// file's front, while `registering` threads take pieces from its back, page-lock them where they
// are (a read-only shared mapping, cudaHostRegisterReadOnly), copy them on a stream of their own
// and unregister each once its copy is done. Front and back meet wherever they meet: no share is
// fixed beforehand. Rows with no registering thread are the bare lanes alone, in the same run.
// Every run's time includes its threads, streams, events and mapping; every run is compared with
// the file byte for byte on the GPU.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "bare_cuda.hpp"

namespace {

using bare::check;
using bare::File;
using bare::Clock;
using bare::seconds_since;

// What is left of the file: [front, back). Lanes take from the front, registering threads from the back.
class Cursor {
 public:
  explicit Cursor(std::size_t end) : back_(end) {}
  // The next `most` bytes (fewer at the meeting point) from the front or the back; {0, 0} once none is left.
  std::pair<std::size_t, std::size_t> from_front(std::size_t most) {
    std::lock_guard lock(mutex_);
    const std::size_t n = std::min(most, back_ - front_);
    front_ += n;
    return {front_ - n, n};
  }
  std::pair<std::size_t, std::size_t> from_back(std::size_t most) {
    std::lock_guard lock(mutex_);
    const std::size_t n = std::min(most, back_ - front_);
    back_ -= n;
    return {back_, n};
  }

 private:
  std::mutex mutex_;
  std::size_t front_ = 0, back_;
};

struct Run {
  double seconds = 0;
  std::size_t registered_bytes = 0;  // copied from page-locked page-cache pages
  double register_ms = 0, unregister_ms = 0;  // summed over the registering threads
};

// Pieces from the back, each page-locked in place, copied, and unregistered once copied (two in flight).
void registering(const File& f, Cursor& cursor, char* device, char* mapping, std::size_t piece, std::mutex& mutex,
                 Run& run) {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  std::deque<std::pair<char*, cudaEvent_t>> in_flight;
  double register_s = 0, unregister_s = 0;
  std::size_t registered = 0;
  auto retire = [&] {
    auto [at, done] = in_flight.front();
    in_flight.pop_front();
    check(cudaEventSynchronize(done), "cudaEventSynchronize");
    check(cudaEventDestroy(done), "cudaEventDestroy");
    const auto t = Clock::now();
    check(cudaHostUnregister(at), "cudaHostUnregister");
    unregister_s += seconds_since(t);
  };
  for (;;) {
    const auto [at, n] = cursor.from_back(piece);
    if (n == 0) break;
    const auto t = Clock::now();
    check(cudaHostRegister(mapping + at, n, cudaHostRegisterReadOnly), "cudaHostRegister");
    register_s += seconds_since(t);
    const std::size_t copied = at < f.bytes ? std::min(n, f.bytes - at) : 0;
    if (copied > 0) check(cudaMemcpyAsync(device + at, mapping + at, copied, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    registered += copied;
    cudaEvent_t done;
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(done, s), "cudaEventRecord");
    in_flight.emplace_back(mapping + at, done);
    if (in_flight.size() >= 2) retire();
  }
  while (!in_flight.empty()) retire();
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  std::lock_guard lock(mutex);
  run.registered_bytes += registered;
  run.register_ms += register_s * 1e3;
  run.unregister_ms += unregister_s * 1e3;
}

Run read_onto_gpu(const File& f, char* device, char* slots, int lanes, int slot_count, std::size_t chunk,
                  int registering_threads, std::size_t piece) {
  Run run;
  std::mutex mutex;
  std::atomic<bool> failed{false};
  const auto started = Clock::now();
  char* mapping = nullptr;
  if (registering_threads > 0) {
    void* m = mmap(nullptr, f.mapped, PROT_READ, MAP_SHARED, f.fd, 0);
    if (m == MAP_FAILED) { std::perror("mmap"); std::exit(1); }
    mapping = static_cast<char*>(m);
  }
  Cursor cursor(f.mapped);
  std::vector<std::thread> threads;
  const auto take = [&] {
    const auto [at, taken] = cursor.from_front(chunk);
    return std::pair{at, at < f.bytes ? std::min(taken, f.bytes - at) : 0};
  };
  for (int k = 0; k < lanes; ++k)
    threads.emplace_back([&, k] {
      bare::read_lane(f.fd, device, slots + std::size_t(k) * slot_count * chunk, slot_count, chunk, take, failed);
    });
  for (int k = 0; k < registering_threads; ++k)
    threads.emplace_back(registering, std::cref(f), std::ref(cursor), device, mapping, piece, std::ref(mutex),
                         std::ref(run));
  for (auto& t : threads) t.join();
  if (mapping) munmap(mapping, f.mapped);
  run.seconds = seconds_since(started);
  if (failed) {
    std::fprintf(stderr, "reads_beside_registered: a read failed\n");
    std::exit(1);
  }
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: reads_beside_registered FILE  (a file of a few GB; it is read into the page cache first)\n");
    return 2;
  }
  const File f = bare::open_file(argv[1]);
  check(cudaSetDevice(0), "cudaSetDevice");
  if (!bare::registers_read_only(f)) return 1;
  bare::warm_page_cache(f.fd, f.bytes);
  char* device = nullptr;
  check(cudaMalloc(&device, f.mapped), "cudaMalloc");
  char* reference = bare::reference_copy(f.fd, f.bytes);
  unsigned long long* differences = nullptr;
  check(cudaMalloc(&differences, sizeof *differences), "cudaMalloc");
  const double link = bare::link_alone();
  std::printf("link alone: %.1f GB/s\n", link);
  constexpr int lanes_max = 16, slot_count = 2;
  constexpr std::size_t chunk_max = std::size_t{4} << 20;
  char* slots = nullptr;
  check(cudaMallocHost(reinterpret_cast<void**>(&slots), lanes_max * slot_count * chunk_max), "cudaMallocHost");
  std::printf("%5s %9s %11s %9s %9s %7s %8s %11s %13s %15s  %s\n", "lanes", "chunk MiB", "registering", "piece MiB",
              "median ms", "GB/s", "of link", "registered", "register ms", "unregister ms", "verified");
  struct Shape { int lanes; std::size_t chunk_mib; int registering; std::size_t piece_mib; };
  std::vector<Shape> shapes;
  for (int lanes : {12, 16})
    for (std::size_t chunk_mib : {2, 4}) {
      shapes.push_back({lanes, chunk_mib, 0, 0});
      for (int r : {1, 2})
        for (std::size_t piece_mib : {16, 64}) shapes.push_back({lanes, chunk_mib, r, piece_mib});
    }
  for (const Shape& shape : shapes) {
    std::vector<std::pair<double, Run>> runs;
    bool verified = true;
    for (int run = 0; run < 4; ++run) {
      check(cudaMemset(device, 0xA5, f.mapped), "cudaMemset");  // poisoned: a chunk not copied shows
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      const Run r = read_onto_gpu(f, device, slots, shape.lanes, slot_count, shape.chunk_mib << 20, shape.registering,
                                  shape.piece_mib << 20);
      if (run > 0) runs.emplace_back(r.seconds, r);  // the first warms the paths
      verified = verified && bare::same_as(device, reference, f.bytes, differences);
    }
    std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const Run& median = runs[runs.size() / 2].second;
    const double gbps = f.bytes / median.seconds / 1e9;
    std::printf("%5d %9zu %11d %9zu %9.1f %7.1f %8.3f %10.0f%% %13.1f %15.1f  %s\n", shape.lanes, shape.chunk_mib,
                shape.registering, shape.piece_mib, median.seconds * 1e3, gbps, gbps / link,
                100.0 * median.registered_bytes / f.bytes, median.register_ms, median.unregister_ms,
                verified ? "bitwise" : "MISMATCH");
    std::fflush(stdout);
  }
  check(cudaFreeHost(slots), "cudaFreeHost");
  check(cudaFree(device), "cudaFree");
  check(cudaFree(reference), "cudaFree");
  check(cudaFree(differences), "cudaFree");
  return 0;
}
