#include "worker_thread.hpp"

#include <stdexcept>

#include "core/thread_name.hpp"

namespace sluice {

WorkerThread::WorkerThread(std::function<void()> setup) : thread_([this, setup = std::move(setup)] { loop(setup); }) {}

WorkerThread::~WorkerThread() {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return !busy_; });
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void WorkerThread::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    if (busy_) throw std::logic_error("WorkerThread::post while a task is still running");
    task_ = std::move(task);
    busy_ = true;
  }
  changed_.notify_all();
}

void WorkerThread::wait_idle() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return !busy_; });
}

void WorkerThread::loop(const std::function<void()>& setup) {
  sluice::detail::name_this_thread("sluice-run");
  if (setup) setup();
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [this] { return stopping_ || (busy_ && task_); });
      if (stopping_) return;
      task = std::move(task_);
      task_ = nullptr;
    }
    task();
    {
      std::lock_guard lock(mutex_);
      busy_ = false;
    }
    changed_.notify_all();
  }
}

}  // namespace sluice
