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

extern "C" {

ssize_t pwrite(int fd, const void* data, size_t bytes, off_t offset) {
  if (sluice::test::fails(FileCall::pwrite, fd)) return -1;
  return ::syscall(SYS_pwrite64, fd, data, bytes, offset);
}

int fsync(int fd) {
  if (sluice::test::fails(FileCall::fsync, fd)) return -1;
  return static_cast<int>(::syscall(SYS_fsync, fd));
}

int close(int fd) {
  const bool fail = sluice::test::fails(FileCall::close, fd);
  const int error = errno;
  const int closed = static_cast<int>(::syscall(SYS_close, fd));  // released either way, as Linux does
  if (!fail) return closed;
  errno = error;
  return -1;
}

int ftruncate(int fd, off_t length) {
  if (sluice::test::fails(FileCall::ftruncate, fd)) return -1;
  return static_cast<int>(::syscall(SYS_ftruncate, fd, length));
}

int fallocate(int fd, int mode, off_t offset, off_t length) {
  if (sluice::test::fails(FileCall::fallocate, fd)) return -1;
  return static_cast<int>(::syscall(SYS_fallocate, fd, mode, offset, length));
}

int renameat(int old_dir, const char* old_name, int new_dir, const char* new_name) {
  if (sluice::test::armed().on.load(std::memory_order_acquire) && sluice::test::armed().call == FileCall::renameat) {
    const std::string old_path =
        old_name[0] == '/' ? std::string(old_name) : sluice::test::path_of_descriptor(old_dir) + "/" + old_name;
    if (sluice::test::fails(FileCall::renameat, old_path)) return -1;
  }
  return static_cast<int>(::syscall(SYS_renameat2, old_dir, old_name, new_dir, new_name, 0));
}

int fstat(int fd, struct stat* st) {
  if (sluice::test::fails(FileCall::fstat, fd)) return -1;
  return static_cast<int>(::syscall(SYS_newfstatat, fd, "", st, AT_EMPTY_PATH));
}

}  // extern "C"
