#include "staging_pool.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/thread_name.hpp"

namespace sluice {

void StagingPool::Job::wait() {
  std::unique_lock lock(mutex);
  finished.wait(lock, [this] { return remaining == 0; });
  if (error) std::rethrow_exception(error);
}

bool StagingPool::Job::done() const {
  std::lock_guard lock(mutex);
  return remaining == 0;
}

unsigned StagingPool::default_thread_count() {
  // Two cores stay with the threads that feed the GPU (a pipeline's driver and
  // drain): with every core copying they were descheduled and chunks waited on
  // them, while the copy rate was flat from 12 to 16 threads on the 16-core test host.
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  return hardware > 4 ? hardware - 2 : hardware;
}

StagingPool::StagingPool(unsigned threads) {
  if (threads == 0) threads = default_thread_count();
  threads_.reserve(threads);
  try {
    for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] {
        sluice::detail::name_this_thread("sluice-stage");
        worker();
      });
  } catch (...) {
    // A thread that could not start: stop the ones that did, then report.
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_ready_.notify_all();
    for (auto& t : threads_) t.join();
    throw;
  }
}

StagingPool::~StagingPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : threads_) t.join();
}

std::size_t StagingPool::piece_bytes_for(std::size_t bytes) const {
  constexpr std::size_t page = 4096;
  const std::size_t threads = std::max<std::size_t>(1, threads_.size());
  const std::size_t even = (bytes + threads - 1) / threads;
  return std::clamp((even + page - 1) / page * page, min_piece_bytes, default_piece_bytes);
}

std::size_t StagingPool::balanced_piece_bytes(std::size_t bytes) const {
  constexpr std::size_t page = 4096, least = std::size_t{256} << 10;
  const std::size_t quarters = 4 * std::max<std::size_t>(1, threads_.size());
  const std::size_t quarter = (bytes + quarters - 1) / quarters;
  return std::max(least, (quarter + page - 1) / page * page);
}

StagingPool::Ticket StagingPool::submit(std::size_t bytes, std::size_t piece_bytes, PieceFn piece, Priority priority) {
  if (piece_bytes == 0) throw std::invalid_argument("staging pool: piece size must be at least 1 byte");
  auto job = std::make_shared<Job>();
  job->piece = std::move(piece);
  job->bytes = bytes;
  job->piece_bytes = piece_bytes;
  job->pieces = (bytes + piece_bytes - 1) / piece_bytes;
  job->remaining = job->pieces;
  if (job->pieces == 0) return job;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw std::logic_error("staging pool: submit after shutdown began");
    if (priority == Priority::urgent)
      queue_.push_front(job);
    else
      queue_.push_back(job);
  }
  if (job->pieces == 1)
    work_ready_.notify_one();
  else
    work_ready_.notify_all();
  return job;
}

void StagingPool::copy(void* dst, const void* src, std::size_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  run(bytes, default_piece_bytes, [d, s](std::size_t offset, std::size_t length) { std::memcpy(d + offset, s + offset, length); });
}

void StagingPool::worker() {
  for (;;) {
    Ticket job;
    std::size_t index = 0;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing is left to run
      job = queue_.front();
      index = job->next++;
      if (job->next == job->pieces) queue_.pop_front();
    }
    bool skip = false;
    {
      std::lock_guard lock(job->mutex);
      skip = job->error != nullptr;
    }
    if (!skip) {
      const std::size_t offset = index * job->piece_bytes;
      try {
        job->piece(offset, std::min(job->piece_bytes, job->bytes - offset));
      } catch (...) {
        std::lock_guard lock(job->mutex);
        if (!job->error) job->error = std::current_exception();
      }
    }
    bool last = false;
    {
      std::lock_guard lock(job->mutex);
      last = --job->remaining == 0;
    }
    if (last) job->finished.notify_all();
  }
}

}  // namespace sluice
