#pragma once
// Failures a test can make a file call return, for the errors no file system
// here makes on demand (a sync that fails, a close that reports a lost write, a
// full disk after the blocks were reserved). The test binary defines the calls
// below itself (injected_faults.cpp): they pass every call to the kernel
// unchanged, except, while an InjectedFault lives, those of its kind on files
// under its directory, which fail with its errno without reaching the kernel
// (a close still releases its descriptor, as Linux's does). While a
// RecordedCalls lives, the same calls on a directory and the files under it are
// recorded in the order they returned: the order that makes a file durable
// (write, sync the file, rename, sync the directory) is then something a test
// can check, where a killed process (whose writes stay in the page cache) cannot.
#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

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

struct RecordedCall {
  FileCall call;
  std::string path;  // the file or directory, as /proc/self/fd names its descriptor; renameat: the old path
  std::string to;    // renameat: the new path
  long result;       // what the call returned
};

class RecordedCalls {
 public:
  // Records the calls on `dir` itself and on files under it; one recording at a time.
  explicit RecordedCalls(const std::filesystem::path& dir);
  ~RecordedCalls();
  RecordedCalls(const RecordedCalls&) = delete;
  RecordedCalls& operator=(const RecordedCalls&) = delete;
  // The calls so far, in the order they returned.
  std::vector<RecordedCall> calls() const;
  // The directory's path as the calls name it (symbolic links resolved).
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace sluice::test
