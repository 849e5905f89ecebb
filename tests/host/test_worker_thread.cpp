#include "pipeline/run/worker_thread.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

using sluice::WorkerThread;

TEST(WorkerThread, RunsPostedTasksOnItsOwnThread) {
  WorkerThread worker;
  std::thread::id ran_on;
  worker.post([&] { ran_on = std::this_thread::get_id(); });
  worker.wait_idle();
  EXPECT_NE(ran_on, std::thread::id());
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(WorkerThread, ReusedForManyTasksOnTheSameThread) {
  WorkerThread worker;
  std::thread::id first;
  int count = 0;
  for (int i = 0; i < 100; ++i) {
    worker.post([&] {
      if (count == 0) first = std::this_thread::get_id();
      EXPECT_EQ(std::this_thread::get_id(), first);
      ++count;
    });
    worker.wait_idle();
  }
  EXPECT_EQ(count, 100);
}

TEST(WorkerThread, RefusesASecondTaskWhileBusy) {
  WorkerThread worker;
  std::atomic<bool> release{false};
  worker.post([&] { while (!release) std::this_thread::yield(); });
  EXPECT_THROW(worker.post([] {}), std::logic_error);
  release = true;
  worker.wait_idle();
  EXPECT_NO_THROW(worker.post([] {}));
}

TEST(WorkerThread, DestructorFinishesTheTaskInHand) {
  std::atomic<bool> finished{false};
  {
    WorkerThread worker;
    worker.post([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      finished = true;
    });
  }
  EXPECT_TRUE(finished);
}

TEST(WorkerThread, WaitIdleWithNothingPostedReturns) {
  WorkerThread worker;
  worker.wait_idle();
  SUCCEED();
}
