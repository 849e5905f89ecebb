// A file -> file run on a disk too full for its output: an IoError naming the
// file, and the file it was to replace left as it was. On a real small file
// system where this process may make one (a tmpfs in a mount namespace of a
// child), and under a file size limit everywhere.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "child_process.hpp"
#include "file_run.hpp"
#include "scratch_dir.hpp"

using namespace sluice::test;

namespace {

constexpr std::string_view skip_mark = "SKIP: ";

bool write_text(const char* path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return static_cast<bool>(out.flush());
}

// Mounts a tmpfs of `options` on `dir`, seen by this (child) process alone. Empty on success, else why not.
std::string mount_private_tmpfs(const std::filesystem::path& dir, const std::string& options) {
  if (::unshare(CLONE_NEWNS) != 0) {
    // Not allowed to make a mount namespace: as its own user namespace's root it may.
    const uid_t uid = ::getuid();
    const gid_t gid = ::getgid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return "this process may not make a mount namespace (unshare: " + std::string(std::strerror(errno)) + ")";
    if (!write_text("/proc/self/setgroups", "deny") ||
        !write_text("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
        !write_text("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1"))
      return "cannot map this user into a user namespace";
  }
  // Nothing mounted here may reach the rest of the system.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return "cannot make the mount namespace private: " + std::string(std::strerror(errno));
  if (::mount("sluice-test", dir.c_str(), "tmpfs", 0, options.c_str()) != 0)
    return "cannot mount a tmpfs: " + std::string(std::strerror(errno));
  return "";
}

// Runs input -> target expecting an IoError with `cause`; then the target must hold `old`, alone.
std::string expect_refused_and_kept(const FileRun& run, const std::vector<std::byte>& old, const std::string& cause) {
  try {
    run_file_to_file(run);
    return "the run succeeded on a disk too small for it";
  } catch (const sluice::IoError& e) {
    const std::string what = e.what();
    if (what.find(run.output.string()) == std::string::npos || what.find(cause) == std::string::npos)
      return "the error does not name the file and '" + cause + "': " + what;
  }
  if (std::string diff = difference(run.output, old); !diff.empty()) return "the old file was changed: " + diff;
  if (names_in(run.output.parent_path()) != std::vector<std::string>{run.output.filename().string()})
    return "the failed run left files beside the target";
  return "";
}

void write_bytes(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST(FileRunFullDisk, ASmallFileSystemRefusesTheRunAndKeepsTheOldFile) {
  ScratchDir dir;
  const auto input = dir / "in.bin", disk = dir / "disk";
  std::filesystem::create_directory(disk);
  const auto in = pattern(150 * 1024, 3);  // 600 KiB
  write_items(input, in);
  const ChildEnd end = run_in_child([&]() -> std::string {
    if (std::string why = mount_private_tmpfs(disk, "size=1m"); !why.empty()) return std::string(skip_mark) + why;
    // The target and its replacement do not both fit on the 1 MiB disk.
    const auto target = disk / "out.bin";
    const auto old = as_bytes(pattern(150 * 1024, 9));
    write_bytes(target, old);
    const FileRun run(input, target, 16 * 1024);
    if (std::string wrong = expect_refused_and_kept(run, old, std::strerror(ENOSPC)); !wrong.empty()) return wrong;
    // Written in place, it fits (and the old file is gone whatever happens).
    FileRun in_place = run;
    in_place.output_options.in_place = true;
    run_file_to_file(in_place);
    if (std::string diff = difference(target, as_bytes(transformed(in))); !diff.empty()) return "the run in place: " + diff;
    return "";
  });
  if (end.message.starts_with(skip_mark)) GTEST_SKIP() << end.message.substr(skip_mark.size());
  EXPECT_EQ(end.exit_code, 0);
  EXPECT_EQ(end.message, "");
}

TEST(FileRunFullDisk, AFileSizeLimitIsAnIoErrorAndKeepsTheOldFile) {
  ScratchDir dir;
  const auto input = dir / "in.bin", out_dir = dir / "out";
  std::filesystem::create_directory(out_dir);
  write_items(input, pattern(256 * 1024, 3));  // 1 MiB
  const auto target = out_dir / "out.bin";
  const auto old = as_bytes(pattern(16 * 1024, 9));
  write_bytes(target, old);
  const ChildEnd end = run_in_child([&]() -> std::string {
    // The kernel refuses to grow any file of this process past 256 KiB (EFBIG), as a full disk would.
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{256 * 1024, 256 * 1024};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return "setrlimit failed: " + std::string(std::strerror(errno));
    return expect_refused_and_kept(FileRun(input, target, 16 * 1024), old, std::strerror(EFBIG));
  });
  EXPECT_EQ(end.exit_code, 0);
  EXPECT_EQ(end.message, "");
}
