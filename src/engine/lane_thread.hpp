#pragma once
// One lane of a host executor: a thread that runs what is enqueued on it, in
// order, as a CUDA stream runs its work. Host-only.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "core/thread_name.hpp"

namespace sluice::engine {

class LaneThread {
 public:
  LaneThread()
      : thread_([this] {
          sluice::detail::name_this_thread("sluice-lane");
          run();
        }) {}
  ~LaneThread() { join(); }
  LaneThread(const LaneThread&) = delete;
  LaneThread& operator=(const LaneThread&) = delete;

  void enqueue(std::function<void()> work) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(work));
    }
    changed_.notify_all();
  }
  // Work enqueued and not yet finished.
  std::size_t pending() const {
    std::lock_guard lock(mutex_);
    return queue_.size() + (busy_ ? 1 : 0);
  }
  // Until its queue is empty and nothing runs (work enqueued meanwhile is
  // waited for too). Never from a task of its own: it would wait for itself.
  void wait_idle() const {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }
  // Runs what is enqueued to the end, then ends the thread.
  void join() {
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::function<void()> work = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      work();  // never throws: the executor's operations catch what they run
      lock.lock();
      busy_ = false;
      if (queue_.empty()) changed_.notify_all();  // wait_idle()
    }
  }

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool closing_ = false;
  std::thread thread_;  // last: starts when everything above exists
};

}  // namespace sluice::engine
