// The file calls every product's file code shares (file_calls.hpp, read_fully.hpp).
#include "io/file_calls.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/read_fully.hpp"
#include "sluice/core/io_error.hpp"

namespace sluice {

detail::ReadOutcome detail::read_fully(int fd, std::byte* at, std::size_t bytes, std::uint64_t offset) {
  ReadOutcome r;
  while (r.done < bytes) {
    const ssize_t got = ::pread(fd, at + r.done, bytes - r.done, static_cast<off_t>(offset + r.done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) r.error = errno;
    if (got <= 0) break;
    r.done += static_cast<std::size_t>(got);
  }
  return r;
}

namespace {

constexpr std::uint64_t direct_alignment = 4096;

}  // namespace

detail::DescriptorGuard::~DescriptorGuard() {
  if (fd_ >= 0) ::close(fd_);
}

std::string detail::errno_text(int code) { return std::strerror(code); }

detail::FileIdentity detail::identity_of(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::uint64_t>(st.st_size), std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec};
}

std::string detail::what_changed(const FileIdentity& then, const FileIdentity& now) {
  std::string changes;
  const auto add = [&](const std::string& change) { changes += (changes.empty() ? "its " : ", its ") + change; };
  if (!now.same_file(then))
    add("inode (" + std::to_string(then.inode) + " on device " + std::to_string(then.device) + ", now " +
        std::to_string(now.inode) + " on device " + std::to_string(now.device) + ")");
  if (now.size != then.size) add("size (" + std::to_string(then.size) + " bytes, now " + std::to_string(now.size) + ")");
  if (now.mtime_ns != then.mtime_ns)
    add("modification time (" + std::to_string(then.mtime_ns) + " ns, now " + std::to_string(now.mtime_ns) + " ns)");
  return changes.empty() ? "nothing fstat shows" : changes;
}

detail::FileIdentity detail::identify(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw IoError(path, 0, "cannot stat: " + errno_text(errno));
  return identity_of(st);
}

std::uint64_t detail::file_size(int fd, const std::string& path) { return identify(fd, path).size; }

int detail::open_direct_at(int dir_fd, const std::string& name, int flags) {
#ifdef O_DIRECT
  return ::openat(dir_fd, name.c_str(), flags | O_DIRECT | O_CLOEXEC);
#else
  (void)dir_fd;
  (void)name;
  (void)flags;
  return -1;
#endif
}

bool detail::direct_ok(int direct_fd, std::uint64_t offset, std::size_t bytes, const void* buffer) {
  return direct_fd >= 0 && offset % direct_alignment == 0 && bytes % direct_alignment == 0 &&
         reinterpret_cast<std::uintptr_t>(buffer) % direct_alignment == 0;
}

}  // namespace sluice
