#include "sluice/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "read_fully.hpp"

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

std::string errno_text(int code) { return std::strerror(code); }

std::uint64_t file_size(int fd, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) throw IoError(path, 0, "cannot stat: " + errno_text(errno));
  return static_cast<std::uint64_t>(st.st_size);
}

// O_DIRECT where the file system takes it; -1 where it does not.
int open_direct(const std::string& path, int flags) {
#ifdef O_DIRECT
  const int fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC);
  return fd;
#else
  (void)path;
  (void)flags;
  return -1;
#endif
}

// Reserves the file's blocks up to `size` where the file system can
// (fallocate); where it cannot, the writes allocate as they go. A disk too
// full for the output is an error here, before the run starts.
void reserve_blocks(int fd, const std::string& path, std::uint64_t size) {
#ifdef __linux__
  if (::fallocate(fd, 0, 0, static_cast<off_t>(size)) == 0) return;
  if (errno == ENOSPC || errno == EFBIG)
    throw IoError(path, 0, "cannot reserve " + std::to_string(size) + " bytes for the output: " + errno_text(errno));
#else
  (void)fd;
  (void)path;
  (void)size;
#endif
}

bool direct_ok(int direct_fd, std::uint64_t offset, std::size_t bytes, const void* buffer) {
  return direct_fd >= 0 && offset % direct_alignment == 0 && bytes % direct_alignment == 0 &&
         reinterpret_cast<std::uintptr_t>(buffer) % direct_alignment == 0;
}

}  // namespace

IoError::IoError(std::string path, std::uint64_t offset, const std::string& what)
    : std::runtime_error(path + ": " + what), path_(std::move(path)), offset_(offset) {}

IoError::IoError(const IoError& cause, const std::string& context)
    : std::runtime_error(context + ": " + cause.what()), path_(cause.path_), offset_(cause.offset_) {}

FileSource::FileSource(std::filesystem::path path, std::size_t item_bytes, FileOptions options)
    : path_(std::move(path)), item_bytes_(item_bytes), options_(options) {
  if (item_bytes == 0) throw std::invalid_argument("file source: item size must be at least 1 byte");
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw IoError(path_.string(), 0, "cannot open for reading: " + errno_text(errno));
  const std::uint64_t size = file_size(fd_, path_.string());
  const std::uint64_t available = size > options_.offset ? (size - options_.offset) / item_bytes_ : 0;
  if (options_.items && *options_.items > available) {
    ::close(fd_);
    throw IoError(path_.string(), size,
                  "holds " + std::to_string(available) + " items of " + std::to_string(item_bytes_) + " bytes after offset " +
                      std::to_string(options_.offset) + " (" + std::to_string(size) + " bytes), but " +
                      std::to_string(*options_.items) + " were asked for");
  }
  items_ = options_.items ? *options_.items : static_cast<std::size_t>(available);
  if (options_.direct) direct_fd_ = open_direct(path_.string(), O_RDONLY);
}

FileSource::~FileSource() {
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (fd_ >= 0) ::close(fd_);
}

void FileSource::begin_run() {
  const std::uint64_t needed = options_.offset + std::uint64_t{items_} * item_bytes_;
  const std::uint64_t size = file_size(fd_, path_.string());
  if (size < needed)
    throw IoError(path_.string(), size,
                  "is " + std::to_string(size) + " bytes now, shorter than the " + std::to_string(needed) +
                      " its items need: it was truncated after it was opened");
}

void FileSource::read(ItemRange range, std::span<std::byte> pinned) {
  const std::uint64_t start = options_.offset + std::uint64_t{range.begin} * item_bytes_;
  const std::size_t bytes = range.size() * item_bytes_;
  const int fd = direct_ok(direct_fd_, start, bytes, pinned.data()) ? direct_fd_ : fd_;
  const detail::ReadOutcome r = detail::read_fully(fd, pinned.data(), bytes, start);
  if (r.error != 0)
    throw IoError(path_.string(), start + r.done,
                  "read of " + std::to_string(bytes - r.done) + " bytes at offset " + std::to_string(start + r.done) +
                      " failed: " + errno_text(r.error));
  if (r.done < bytes)
    throw IoError(path_.string(), start + r.done,
                  "ended at offset " + std::to_string(start + r.done) + ", before the " + std::to_string(bytes) +
                      " bytes from offset " + std::to_string(start) + " (file is " +
                      std::to_string(file_size(fd_, path_.string())) + " bytes now)");
}

FileSink::FileSink(std::filesystem::path path, std::size_t item_bytes, std::size_t items, FileOptions options)
    : path_(std::move(path)), item_bytes_(item_bytes), items_(items), options_(options) {
  if (item_bytes == 0) throw std::invalid_argument("file sink: item size must be at least 1 byte");
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError(path_.string(), 0, "cannot open for writing: " + errno_text(errno));
  if (options_.direct) direct_fd_ = open_direct(path_.string(), O_WRONLY);
}

FileSink::~FileSink() {
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (fd_ >= 0) ::close(fd_);
}

void FileSink::begin_run() {
  const std::uint64_t size = options_.offset + std::uint64_t{items_} * item_bytes_;
  // A new file's blocks are reserved before the run: on ext4 the pipeline
  // wrote 2 GiB into a preallocated file 15 % faster than into a sparse one
  // (docs/measurements.md). A file already that long keeps its blocks.
  if (file_size(fd_, path_.string()) < size) reserve_blocks(fd_, path_.string(), size);
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
    throw IoError(path_.string(), size, "cannot size the file to " + std::to_string(size) + " bytes: " + errno_text(errno));
}

void FileSink::write(ItemRange range, std::span<const std::byte> pinned) {
  const std::uint64_t start = options_.offset + std::uint64_t{range.begin} * item_bytes_;
  const std::size_t bytes = range.size() * item_bytes_;
  const int fd = direct_ok(direct_fd_, start, bytes, pinned.data()) ? direct_fd_ : fd_;
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t put = ::pwrite(fd, pinned.data() + done, bytes - done, static_cast<off_t>(start + done));
    if (put < 0) {
      if (errno == EINTR) continue;
      throw IoError(path_.string(), start + done,
                    "write of " + std::to_string(bytes - done) + " bytes at offset " + std::to_string(start + done) +
                        " failed: " + errno_text(errno));
    }
    done += static_cast<std::size_t>(put);
  }
}

void FileSink::end_run(bool completed, std::size_t items_done) {
  if (completed) return;
  // Nothing past the last finished chunk stays in the file.
  const std::uint64_t keep = options_.offset + std::uint64_t{items_done} * item_bytes_;
  (void)::ftruncate(fd_, static_cast<off_t>(keep));
}

}  // namespace sluice
