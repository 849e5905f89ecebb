#pragma once
// What every product's file code shares (the pipeline's file source and
// sink, the rings' file reads, checkpoints): descriptors closed on every path
// out of a constructor, which file a path names now, file sizes, and direct
// I/O where the file system takes it. Host-only.
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice::detail {

// Closes the descriptor it holds unless it was released: for the descriptors a
// constructor opens before something after it may throw.
class DescriptorGuard {
 public:
  explicit DescriptorGuard(int fd) : fd_(fd) {}
  ~DescriptorGuard();
  DescriptorGuard(const DescriptorGuard&) = delete;
  DescriptorGuard& operator=(const DescriptorGuard&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

std::string errno_text(int code);

// Which file a descriptor or a path names, its size and when it was last
// written: a file renamed over a path has another device or inode than the one
// a descriptor still holds; one written in place has another size or
// modification time (unless the write kept its size and fell within the file
// system's timestamp granularity, which fstat cannot see).
struct FileIdentity {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;  // since the epoch
  bool same_file(const FileIdentity& other) const { return device == other.device && inode == other.inode; }
  // The same file, as it was then: neither replaced nor, as far as fstat can tell, written since.
  bool unchanged_since(const FileIdentity& then) const {
    return same_file(then) && size == then.size && mtime_ns == then.mtime_ns;
  }
};

// What differs between two identities of a path, for a message: "its inode (12 on device 2049, now 13 on
// device 2049)", "its size (100 bytes, now 120)", "its modification time (..., now ...)".
std::string what_changed(const FileIdentity& then, const FileIdentity& now);

// A stat's identity (from stat() of a path, or fstat()).
FileIdentity identity_of(const struct stat& st);

// Throw IoError naming `path` when fstat fails.
FileIdentity identify(int fd, const std::string& path);
std::uint64_t file_size(int fd, const std::string& path);

// -1 where the file system refuses O_DIRECT (or the platform has none).
int open_direct_at(int dir_fd, const std::string& name, int flags);

// Whether a transfer may take the O_DIRECT descriptor: only aligned offsets, sizes and buffers may.
bool direct_ok(int direct_fd, std::uint64_t offset, std::size_t bytes, const void* buffer);

}  // namespace sluice::detail
