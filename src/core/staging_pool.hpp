#pragma once
// One pool of host threads for every byte the host moves for the GPU:
// pageable -> pinned copies (stage-in), pinned -> pageable copies
// (stage-out), file reads into pinned slots and writes out of them.
//
// Work is submitted as a job over a byte range that the pool cuts into
// pieces; threads take pieces first come, first served, across jobs. So two
// directions staging at once share the threads in proportion to their bytes
// (vector add stages twice as much in as out), with no fixed split to tune.
// Measured on a 16-core host (docs/measurements.md): one thread copies
// ~6-10 GB/s, 16 threads in 1 MiB pieces ~70 GB/s. Host-only.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice {

class StagingPool {
 public:
  // Runs piece(offset, length) for one piece of a job's byte range.
  using PieceFn = std::function<void(std::size_t offset, std::size_t length)>;

  class Job {
   public:
    // Blocks until every piece has run, then rethrows the first exception a
    // piece threw. Once a piece has thrown, the job's later pieces are skipped.
    void wait();
    bool done() const;

   private:
    friend class StagingPool;
    PieceFn piece;
    std::size_t bytes = 0, piece_bytes = 0, pieces = 0;
    std::size_t next = 0;       // next piece to hand out (under the pool's lock)
    std::size_t remaining = 0;  // pieces not finished (under `mutex`)
    std::exception_ptr error;
    mutable std::mutex mutex;
    std::condition_variable finished;
  };
  using Ticket = std::shared_ptr<Job>;

  // threads == 0 picks default_thread_count().
  explicit StagingPool(unsigned threads = 0);
  // Runs what is queued, then joins.
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  unsigned thread_count() const { return static_cast<unsigned>(threads_.size()); }

  // Queues a job over [0, bytes) in pieces of at most piece_bytes (the last
  // may be shorter); a job of zero bytes is done at once. An urgent job goes
  // before every job queued: stage-out frees the slots the GPU waits for,
  // and must not queue behind stage-in running ahead.
  enum class Priority { normal, urgent };
  Ticket submit(std::size_t bytes, std::size_t piece_bytes, PieceFn piece, Priority priority = Priority::normal);
  // submit, then wait.
  void run(std::size_t bytes, std::size_t piece_bytes, PieceFn piece) { submit(bytes, piece_bytes, std::move(piece))->wait(); }
  // Copies with every thread (memcpy; see copy_streaming for the stores that bypass the cache).
  void copy(void* dst, const void* src, std::size_t bytes);

  // Two fewer than the hardware threads (all of them on 4 or fewer), leaving
  // the threads that feed the GPU a core each.
  static unsigned default_thread_count();
  static constexpr std::size_t default_piece_bytes = std::size_t{1} << 20;
  static constexpr std::size_t min_piece_bytes = std::size_t{64} << 10;
  // Pieces that spread a job of `bytes` over every thread, from
  // min_piece_bytes up to default_piece_bytes. A pipeline's chunk is copied
  // while the GPU waits for it: a 2 MiB chunk in 1 MiB pieces would keep 2
  // of 14 threads busy (a staged copy of 256 MiB in 2 MiB chunks took 16.5
  // ms that way on the H200's host, 7.5 ms in 8 MiB chunks).
  std::size_t piece_bytes_for(std::size_t bytes) const;
  // Pieces for a job that must end as early as its slowest thread allows
  // (a batch, a chunk of a file): about four a thread, whole pages (so that
  // O_DIRECT takes them), at least 256 KiB. Threads that finish early take
  // more, so that one slowed (page faults on a DataLoader's fresh shared
  // memory, a page-cache lock, preemption) does not hold up the job, as
  // pieces of a fixed size would not spread it evenly (32 MiB in 1 MiB pieces
  // on 14 threads is 3 rounds for some, 2 for others).
  std::size_t balanced_piece_bytes(std::size_t bytes) const;

 private:
  void worker();
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::deque<Ticket> queue_;  // jobs with pieces not yet handed out, oldest first
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace sluice
