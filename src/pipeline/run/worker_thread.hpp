#pragma once
// One long-lived thread that runs posted tasks one at a time, so a pipeline
// pays for thread creation once, not on every run. Host-only.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace sluice {

class WorkerThread {
 public:
  // `setup` runs once on the new thread before any task (a thread setting).
  explicit WorkerThread(std::function<void()> setup = {});
  ~WorkerThread();  // finishes the task in hand, then joins
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  // Starts `task` on the worker. Throws std::logic_error if one is still running.
  // The task must not throw: catch inside and hand the error over yourself.
  void post(std::function<void()> task);
  // Blocks until the posted task (if any) has returned.
  void wait_idle();

 private:
  void loop(const std::function<void()>& setup);
  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> task_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the state above exists
};

}  // namespace sluice
