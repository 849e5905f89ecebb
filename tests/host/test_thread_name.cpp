// sluice's threads carry names a user sees in `top -H`, a debugger or a profiler.
#include "core/thread_name.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/staging_pool.hpp"

namespace {

// The names of this process's threads, as the kernel keeps them.
std::vector<std::string> thread_names() {
  std::vector<std::string> names;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) names.push_back(name);
  }
  return names;
}

long count_named(const std::string& name) {
  const auto names = thread_names();
  return std::count(names.begin(), names.end(), name);
}

}  // namespace

TEST(ThreadName, StagingThreadsAreNamed) {
  if (!std::filesystem::exists("/proc/self/task")) GTEST_SKIP() << "no /proc/self/task to read thread names from";
  const long before = count_named("sluice-stage");
  {
    sluice::StagingPool pool(3);
    // A thread names itself as it starts: wait until all three have.
    for (int i = 0; i < 2000 && count_named("sluice-stage") < before + 3; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(count_named("sluice-stage"), before + 3);
  }
  EXPECT_EQ(count_named("sluice-stage"), before);
}

TEST(ThreadName, ALongNameIsCutToWhatTheKernelKeeps) {
  if (!std::filesystem::exists("/proc/self/task")) GTEST_SKIP() << "no /proc/self/task to read thread names from";
  std::string seen;
  std::thread([&] {
    // 22 characters: pthread_setname_np refuses more than 15, so an uncut name would leave the old one.
    sluice::detail::name_this_thread("sluice-a-very-long-one");
    std::ifstream comm("/proc/thread-self/comm");
    std::getline(comm, seen);
  }).join();
  EXPECT_EQ(seen, "sluice-a-very-l");
}
