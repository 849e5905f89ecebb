// The file calls of the test binary: these definitions come before the C
// library's for every caller in the binary, the library under test included.
// They go to the kernel directly (syscall), so that they need nothing from
// the C library's own lookup, and fail instead only where an InjectedFault
// says so.
#include "injected_faults.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <mutex>
#include <stdexcept>

namespace sluice::test {
namespace {

struct Armed {
  std::atomic<bool> on{false};
  FileCall call{};
  int error = 0;
  std::string dir;
  std::atomic<int> pass{0};
  std::atomic<int> failed{0};
};

Armed& armed() {
  static Armed a;
  return a;
}

std::string path_of_descriptor(int fd) {
  char link[64], target[PATH_MAX];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<std::size_t>(n)) : std::string();
}

bool under(const std::string& path, const std::string& dir) {
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
}

struct Recording {
  std::atomic<bool> on{false};
  std::string dir;
  std::mutex mutex;
  std::vector<RecordedCall> calls;
};

Recording& recording() {
  static Recording r;
  return r;
}

// Records a call on `path` (or on `fd`'s file, when `path` is empty) that returned `result`.
void record(FileCall call, int fd, long result, std::string path = {}, std::string to = {}) {
  Recording& r = recording();
  if (!r.on.load(std::memory_order_acquire)) return;
  const int error = errno;  // a failed call's errno reaches its caller unchanged
  if (path.empty()) path = path_of_descriptor(fd);
  if (path == r.dir || under(path, r.dir)) {
    const std::lock_guard lock(r.mutex);
    r.calls.push_back({call, std::move(path), std::move(to), result});
  }
  errno = error;
}

std::string path_at(int dir_fd, const char* name) {
  return name[0] == '/' ? std::string(name) : path_of_descriptor(dir_fd) + "/" + name;
}

// Whether this call fails; sets errno when it does.
bool fails(FileCall call, const std::string& path) {
  Armed& a = armed();
  if (!a.on.load(std::memory_order_acquire) || a.call != call || !under(path, a.dir)) return false;
  if (a.pass.fetch_sub(1) > 0) return false;
  ++a.failed;
  errno = a.error;
  return true;
}

bool fails(FileCall call, int fd) {
  return armed().on.load(std::memory_order_acquire) && armed().call == call && fails(call, path_of_descriptor(fd));
}

}  // namespace

InjectedFault::InjectedFault(FileCall call, int error, const std::filesystem::path& dir, int pass) {
  Armed& a = armed();
  if (a.on) throw std::logic_error("one injected fault at a time");
  a.call = call;
  a.error = error;
  a.dir = std::filesystem::canonical(dir).string();
  a.pass = pass;
  a.failed = 0;
  a.on.store(true, std::memory_order_release);
}

InjectedFault::~InjectedFault() { armed().on = false; }

int InjectedFault::failed() const { return armed().failed; }

RecordedCalls::RecordedCalls(const std::filesystem::path& dir) : dir_(std::filesystem::canonical(dir).string()) {
  Recording& r = recording();
  if (r.on) throw std::logic_error("one recording of file calls at a time");
  {
    const std::lock_guard lock(r.mutex);
    r.dir = dir_;
    r.calls.clear();
  }
  r.on.store(true, std::memory_order_release);
}

RecordedCalls::~RecordedCalls() { recording().on = false; }

std::vector<RecordedCall> RecordedCalls::calls() const {
  Recording& r = recording();
  const std::lock_guard lock(r.mutex);
  return r.calls;
}

std::string to_string(FileCall call) {
  switch (call) {
    case FileCall::pwrite: return "pwrite";
    case FileCall::fsync: return "fsync";
    case FileCall::close: return "close";
    case FileCall::ftruncate: return "ftruncate";
    case FileCall::fallocate: return "fallocate";
    case FileCall::renameat: return "renameat";
    case FileCall::fstat: return "fstat";
  }
  return "?";
}

}  // namespace sluice::test

using sluice::test::FileCall;
using sluice::test::record;

extern "C" {

ssize_t pwrite(int fd, const void* data, size_t bytes, off_t offset) {
  const ssize_t put = sluice::test::fails(FileCall::pwrite, fd) ? -1 : ::syscall(SYS_pwrite64, fd, data, bytes, offset);
  record(FileCall::pwrite, fd, put);
  return put;
}

int fsync(int fd) {
  const int synced = sluice::test::fails(FileCall::fsync, fd) ? -1 : static_cast<int>(::syscall(SYS_fsync, fd));
  record(FileCall::fsync, fd, synced);
  return synced;
}

int close(int fd) {
  // Named before the descriptor is released, as nothing can name it after.
  const bool recording = sluice::test::recording().on.load(std::memory_order_acquire);
  const std::string path = recording ? sluice::test::path_of_descriptor(fd) : std::string();
  const bool fail = sluice::test::fails(FileCall::close, fd);
  const int error = errno;
  int closed = static_cast<int>(::syscall(SYS_close, fd));  // released either way, as Linux does
  if (fail) {
    errno = error;
    closed = -1;
  }
  if (recording && !path.empty()) record(FileCall::close, fd, closed, path);
  return closed;
}

int ftruncate(int fd, off_t length) {
  const int cut = sluice::test::fails(FileCall::ftruncate, fd) ? -1 : static_cast<int>(::syscall(SYS_ftruncate, fd, length));
  record(FileCall::ftruncate, fd, cut);
  return cut;
}

int fallocate(int fd, int mode, off_t offset, off_t length) {
  const int reserved =
      sluice::test::fails(FileCall::fallocate, fd) ? -1 : static_cast<int>(::syscall(SYS_fallocate, fd, mode, offset, length));
  record(FileCall::fallocate, fd, reserved);
  return reserved;
}

int renameat(int old_dir, const char* old_name, int new_dir, const char* new_name) {
  const bool watched = (sluice::test::armed().on.load(std::memory_order_acquire) &&
                        sluice::test::armed().call == FileCall::renameat) ||
                       sluice::test::recording().on.load(std::memory_order_acquire);
  const std::string old_path = watched ? sluice::test::path_at(old_dir, old_name) : std::string();
  const std::string new_path = watched ? sluice::test::path_at(new_dir, new_name) : std::string();
  const int renamed = watched && sluice::test::fails(FileCall::renameat, old_path)
                          ? -1
                          : static_cast<int>(::syscall(SYS_renameat2, old_dir, old_name, new_dir, new_name, 0));
  if (watched) record(FileCall::renameat, old_dir, renamed, old_path, new_path);
  return renamed;
}

int fstat(int fd, struct stat* st) {
  const int got =
      sluice::test::fails(FileCall::fstat, fd) ? -1 : static_cast<int>(::syscall(SYS_newfstatat, fd, "", st, AT_EMPTY_PATH));
  record(FileCall::fstat, fd, got);
  return got;
}

}  // extern "C"
