#pragma once
// A file in memory (memfd) that tests write pieces into at chosen offsets,
// closed when it goes: the file a batch's piece names when staging is to read
// it with pread rather than through its pointer. Host-only.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace sluice::test {

struct MemoryFile {
  int fd = ::memfd_create("batch-pieces", 0);
  MemoryFile() { EXPECT_GE(fd, 0) << std::strerror(errno); }
  ~MemoryFile() {
    if (fd >= 0) ::close(fd);
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  void write(std::span<const std::byte> bytes, std::uint64_t offset) const {
    ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)), static_cast<ssize_t>(bytes.size()));
  }
};

}  // namespace sluice::test
