#pragma once
// How much of a file the page cache holds: what tells I/O that went around the
// cache (O_DIRECT) from I/O that went through it.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace sluice::test {

// Pages of the file that are in the page cache (mincore over a mapping of it).
inline std::size_t cached_pages(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path.string());
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size <= 0) {
    ::close(fd);
    return 0;
  }
  void* map = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) throw std::runtime_error("cannot map " + path.string());
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((static_cast<std::size_t>(size) + page - 1) / page);
  const int rc = ::mincore(map, static_cast<std::size_t>(size), resident.data());
  ::munmap(map, static_cast<std::size_t>(size));
  if (rc != 0) throw std::runtime_error("mincore failed on " + path.string());
  std::size_t count = 0;
  for (unsigned char r : resident) count += r & 1;
  return count;
}

// Writes the file's pages back and asks the kernel to drop them; true when none is left cached.
inline bool drop_from_cache(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return cached_pages(path) == 0;
}

}  // namespace sluice::test
