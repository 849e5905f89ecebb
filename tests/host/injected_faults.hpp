#pragma once
// Failures a test can make a file call return, for the errors no file system
// here makes on demand (a sync that fails, a close that reports a lost write, a
// full disk after the blocks were reserved). The test binary defines the calls
// below itself (injected_faults.cpp): they pass every call to the kernel
// unchanged, except, while an InjectedFault lives, those of its kind on files
// under its directory, which fail with its errno without reaching the kernel
// (a close still releases its descriptor, as Linux's does).
#include <atomic>
#include <filesystem>
#include <string>

namespace sluice::test {

enum class FileCall { pwrite, fsync, close, ftruncate, fallocate, renameat, fstat };

class InjectedFault {
 public:
  // The first `pass` calls of `call` on files under `dir` go through; every later one fails with `error`.
  InjectedFault(FileCall call, int error, const std::filesystem::path& dir, int pass = 0);
  ~InjectedFault();
  InjectedFault(const InjectedFault&) = delete;
  InjectedFault& operator=(const InjectedFault&) = delete;
  // How many calls it failed.
  int failed() const;
};

std::string to_string(FileCall call);

}  // namespace sluice::test
