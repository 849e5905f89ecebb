// A file -> file run killed with SIGKILL at any point leaves its target either
// the file it was replacing or the complete new one, never a mix: stopped at
// each kind of step and killed there, then killed after delays spread over a
// whole run, so that kills land inside writes, syncs and the rename. The new
// file a killed run leaves is removed by the next run of that target, and not
// while the run that writes it lives.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <thread>

#include "child_process.hpp"
#include "file_run.hpp"
#include "scratch_dir.hpp"

using namespace sluice::test;

namespace {

constexpr std::size_t items = std::size_t{2} << 20;  // 8 MiB of 4-byte items
constexpr std::size_t chunks = 32;
constexpr std::size_t last_step = chunks + 1;  // after commit

class FileRunKilled : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto in = pattern(items, 11);
    write_items(input_, in);
    old_ = as_bytes(pattern(items / 2 + 13, 5));  // another size, other values
    new_ = as_bytes(transformed(in));
  }

  // The target back to the old file, and nothing else beside it.
  void reset() {
    for (const auto& name : names_in(dir_.path()))
      if (name != "in.bin") std::filesystem::remove(dir_ / name);
    std::ofstream(target_, std::ios::binary)
        .write(reinterpret_cast<const char*>(old_.data()), static_cast<std::streamsize>(old_.size()));
  }

  // Starts the run in a child that stops itself after `stop_after` (a step), if given.
  std::unique_ptr<Child> start(std::optional<std::size_t> stop_after) {
    FileRun run(input_, target_, items / chunks);
    return std::make_unique<Child>([run, stop_after](const ChildReport& report) mutable {
      run.after_step = [&](std::size_t step) {
        report.step(static_cast<unsigned char>(step));
        if (stop_after == step) ::raise(SIGSTOP);
      };
      run_file_to_file(run);
      return std::string();
    });
  }

  enum class Found { old_file, new_file, neither };
  // What the target holds; and what lies beside it must be one run's new file at most.
  Found look(const std::string& when) {
    std::size_t beside = 0;
    for (const auto& name : names_in(dir_.path())) {
      if (name == "in.bin" || name == "out.bin") continue;
      EXPECT_EQ(name.rfind("out.bin.sluice-partial-", 0), 0u) << when << ": " << name << " beside the target";
      ++beside;
    }
    EXPECT_LE(beside, 1u) << when;
    const auto bytes = file_bytes(target_);
    if (bytes == old_) return Found::old_file;
    if (bytes == new_) return Found::new_file;
    ADD_FAILURE() << when << ": the target is neither the old file nor the new one (" << bytes.size() << " bytes)";
    return Found::neither;
  }

  ScratchDir dir_;
  const std::filesystem::path input_ = dir_ / "in.bin", target_ = dir_ / "out.bin";
  std::vector<std::byte> old_, new_;
};

}  // namespace

TEST_F(FileRunKilled, AtEachStepLeavesTheOldFileUntilCommitAndTheNewOneAfter) {
  for (std::size_t stop : {std::size_t{0}, std::size_t{1}, chunks / 2, chunks, last_step}) {
    reset();
    auto child = start(stop);
    ASSERT_TRUE(child->wait_until_stopped()) << "the run ended before step " << stop << ": " << child->wait().message;
    child->kill();
    const ChildEnd end = child->wait();
    EXPECT_TRUE(end.killed && end.signal == SIGKILL) << "step " << stop;
    const std::string when = "killed after step " + std::to_string(stop);
    EXPECT_EQ(look(when), stop < last_step ? Found::old_file : Found::new_file) << when;
  }
}

TEST_F(FileRunKilled, AnywhereLeavesTheOldFileOrTheCompleteNewOne) {
  // How long a whole run takes here: the shortest of three (the first may wait for the disk
  // to take what the test wrote before it).
  auto whole = std::chrono::steady_clock::duration::max();
  for (int r = 0; r < 3; ++r) {
    reset();
    const auto began = std::chrono::steady_clock::now();
    auto child = start(std::nullopt);
    const ChildEnd end = child->wait();
    whole = std::min(whole, std::chrono::steady_clock::now() - began);
    ASSERT_FALSE(end.killed);
    ASSERT_EQ(end.exit_code, 0) << end.message;
    ASSERT_EQ(look("a whole run"), Found::new_file);
  }
  // Delays spread over one and a half runs: kills land in every part of one.
  constexpr int kills = 40;
  int old_files = 0, new_files = 0;
  for (int k = 0; k < kills; ++k) {
    reset();
    auto child = start(std::nullopt);
    std::this_thread::sleep_for(whole * (k + 1) * 3 / (2 * kills));
    child->kill();
    const ChildEnd end = child->wait();
    EXPECT_TRUE(end.killed || (end.exit_code == 0 && end.message.empty())) << end.message;
    const Found found = look("kill " + std::to_string(k));
    old_files += found == Found::old_file;
    new_files += found == Found::new_file;
  }
  std::printf("%d kills: %d left the old file, %d the new one\n", kills, old_files, new_files);
  EXPECT_EQ(old_files + new_files, kills);
}

TEST_F(FileRunKilled, TheNextRunRemovesTheNewFilesOfKilledRunsButNotOfALiveOne) {
  reset();
  const auto partials = [&] {
    std::vector<std::string> found;
    for (const auto& name : names_in(dir_.path()))
      if (name.rfind("out.bin.sluice-partial-", 0) == 0) found.push_back(name);
    return found;
  };
  const auto killed_at = [&](std::size_t step) {
    auto child = start(step);
    EXPECT_TRUE(child->wait_until_stopped()) << child->wait().message;
    child->kill();
    EXPECT_TRUE(child->wait().killed);
  };
  // Runs killed one after another (the preemptions): each leaves its new file, the
  // output's full size, and each run after one removes the file the one before left.
  std::vector<std::string> before;
  for (std::size_t stop : {std::size_t{0}, chunks / 2, chunks}) {
    killed_at(stop);
    const auto now = partials();
    ASSERT_EQ(now.size(), 1u) << "killed after step " << stop
                              << ": a killed run's new file was not removed, or none was left";
    EXPECT_NE(now, before) << "killed after step " << stop;
    EXPECT_EQ(std::filesystem::file_size(dir_ / now[0]), new_.size());
    before = now;
  }

  // A run stopped midway, alive: its new file is in use (another process holds its lock).
  auto live = start(chunks / 2);
  ASSERT_TRUE(live->wait_until_stopped()) << live->wait().message;
  const auto live_file = partials();
  ASSERT_EQ(live_file.size(), 1u) << "the killed run's file stayed, or the live run made none";
  EXPECT_NE(live_file, before);
  // Another run killed beside it, then a whole run: the killed one's file goes, the live one's stays.
  killed_at(chunks / 2);
  ASSERT_EQ(partials().size(), 2u) << "a run removed the file of a live one, or a killed run left none";
  run_file_to_file(FileRun(input_, target_, items / chunks));
  EXPECT_EQ(difference(target_, new_), "");
  EXPECT_EQ(partials(), live_file);

  // Once that run is killed too, the next run removes its file.
  live->kill();
  ASSERT_TRUE(live->wait().killed);
  EXPECT_EQ(partials(), live_file);
  run_file_to_file(FileRun(input_, target_, items / chunks));
  EXPECT_EQ(difference(target_, new_), "");
  EXPECT_EQ(names_in(dir_.path()), (std::vector<std::string>{"in.bin", "out.bin"}));
}
