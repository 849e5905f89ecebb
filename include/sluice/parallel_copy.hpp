#pragma once
// A pool of worker threads that copies one large host buffer into another,
// split into contiguous pieces, one per worker. One CPU thread's memcpy moves
// 6-10 GB/s, below a PCIe Gen5 link; several together reach it. This is how
// sluice stages pageable memory through pinned buffers. Host-only.
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice {

class ParallelCopier {
 public:
  // threads == 0 picks a default from the hardware (see default_thread_count).
  explicit ParallelCopier(unsigned threads = 0);
  ~ParallelCopier();
  ParallelCopier(const ParallelCopier&) = delete;
  ParallelCopier& operator=(const ParallelCopier&) = delete;

  unsigned thread_count() const { return static_cast<unsigned>(workers_.size()) + 1; }

  // Copies bytes from src to dst using every thread (the caller's included) and
  // returns when all of it has landed. Pieces below min_piece_bytes are not
  // split further: a thread hand-off costs more than copying a few KiB.
  // Not reentrant: one copy at a time per copier.
  void copy(void* dst, const void* src, std::size_t bytes);

  static unsigned default_thread_count();
  static constexpr std::size_t min_piece_bytes = 256 * 1024;

 private:
  void worker_loop(unsigned index);

  struct Job {
    char* dst = nullptr;
    const char* src = nullptr;
    std::size_t bytes = 0;
    unsigned pieces = 0;
  };

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable job_ready_;
  std::condition_variable job_done_;
  Job job_;
  std::size_t generation_ = 0;
  unsigned pending_ = 0;
  bool stopping_ = false;
};

// Copies `piece` of `pieces` equal parts (the last takes the remainder).
void copy_piece(char* dst, const char* src, std::size_t bytes, unsigned piece, unsigned pieces);

}  // namespace sluice
