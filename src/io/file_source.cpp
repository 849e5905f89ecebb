#include "sluice/pipeline/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/file_calls.hpp"
#include "io/read_fully.hpp"

namespace sluice {

FileSource::FileSource(std::filesystem::path path, std::size_t item_bytes, FileOptions options)
    : path_(std::move(path)), item_bytes_(item_bytes), options_(options) {
  using detail::errno_text;
  if (item_bytes == 0) throw std::invalid_argument("file source: item size must be at least 1 byte");
  const std::string name = path_.string();
  detail::DescriptorGuard fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw IoError(name, 0, "cannot open for reading: " + errno_text(errno));
  const detail::FileIdentity file = detail::identify(fd.get(), name);
  const std::uint64_t size = file.size;
  if (size < options_.offset)
    throw IoError(name, size,
                  "is " + std::to_string(size) + " bytes, shorter than the " + std::to_string(options_.offset) +
                      "-byte header before its first item");
  const std::uint64_t after = size - options_.offset;
  const std::uint64_t available = after / item_bytes_;
  if (options_.items && *options_.items > available)
    throw IoError(name, size,
                  "holds " + std::to_string(available) + " items of " + std::to_string(item_bytes_) + " bytes after offset " +
                      std::to_string(options_.offset) + " (" + std::to_string(size) + " bytes), but " +
                      std::to_string(*options_.items) + " were asked for");
  const std::uint64_t partial = after % item_bytes_;
  if (!options_.items && partial != 0 && !options_.leave_partial_item)
    throw IoError(name, size - partial,
                  "holds " + std::to_string(after) + " bytes after offset " + std::to_string(options_.offset) + ": " +
                      std::to_string(available) + " items of " + std::to_string(item_bytes_) + " bytes and " +
                      std::to_string(partial) + " bytes of a partial item at offset " + std::to_string(size - partial) +
                      " (FileOptions::leave_partial_item reads the whole items and leaves those bytes out)");
  items_ = options_.items ? *options_.items : static_cast<std::size_t>(available);
  bytes_left_out_ = after - std::uint64_t{items_} * item_bytes_;
  if (options_.direct) direct_fd_ = detail::open_direct_at(AT_FDCWD, name, O_RDONLY);
  fd_ = fd.release();
  device_ = file.device;
  inode_ = file.inode;
}

FileSource::~FileSource() {
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (fd_ >= 0) ::close(fd_);
}

void FileSource::begin_run() {
  // Files are replaced by renaming a new file over the old one (as FileSink does): the
  // descriptor opened when the source was made still reads the old file, unlinked, so each run
  // looks at what the path names now.
  const std::string name = path_.string();
  struct stat now {};
  if (::stat(path_.c_str(), &now) != 0)
    throw IoError(name, 0, "cannot stat: " + detail::errno_text(errno) + " (it was there when the source was made)");
  const detail::FileIdentity file = detail::identity_of(now);
  if (!file.same_file({device_, inode_, 0})) {
    reopen();
    return;
  }
  const std::uint64_t needed = options_.offset + std::uint64_t{items_} * item_bytes_;
  if (file.size < needed)
    throw IoError(name, file.size,
                  "is " + std::to_string(file.size) + " bytes now, shorter than the " + std::to_string(needed) +
                      " its items need: it was truncated after it was opened");
}

void FileSource::reopen() {
  using detail::errno_text;
  const std::string name = path_.string();
  detail::DescriptorGuard fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    throw IoError(name, 0, "was replaced since the source was made, and cannot be opened again: " + errno_text(errno));
  const detail::FileIdentity file = detail::identify(fd.get(), name);
  const std::uint64_t after = file.size > options_.offset ? file.size - options_.offset : 0;
  const std::uint64_t available = after / item_bytes_, partial = after % item_bytes_;
  // The pipeline was built for items_ items: a file that holds another count (or, without a
  // count asked for, a partial item that was not to be left out) cannot stand in for it.
  const bool fits = file.size >= options_.offset &&
                    (options_.items ? available >= items_
                                    : available == items_ && (partial == 0 || options_.leave_partial_item));
  if (!fits)
    throw IoError(name, file.size,
                  "was replaced since the source was made, by a file of " + std::to_string(file.size) + " bytes: " +
                      std::to_string(available) + " items of " + std::to_string(item_bytes_) + " bytes after offset " +
                      std::to_string(options_.offset) +
                      (partial != 0 ? " and " + std::to_string(partial) + " bytes of a partial item" : std::string()) +
                      ", where the source was made for " + std::to_string(items_) + " items (" +
                      std::to_string(options_.offset + std::uint64_t{items_} * item_bytes_) +
                      " bytes); a source for the new file takes its items");
  const int direct_fd = options_.direct ? detail::open_direct_at(AT_FDCWD, name, O_RDONLY) : -1;
  if (direct_fd_ >= 0) ::close(direct_fd_);
  ::close(fd_);
  fd_ = fd.release();
  direct_fd_ = direct_fd;
  device_ = file.device;
  inode_ = file.inode;
  bytes_left_out_ = after - std::uint64_t{items_} * item_bytes_;
}

void FileSource::read(ItemRange range, std::span<std::byte> pinned) {
  const std::uint64_t start = options_.offset + std::uint64_t{range.begin} * item_bytes_;
  const std::size_t bytes = range.size() * item_bytes_;
  const int fd = detail::direct_ok(direct_fd_, start, bytes, pinned.data()) ? direct_fd_ : fd_;
  const detail::ReadOutcome r = detail::read_fully(fd, pinned.data(), bytes, start);
  if (r.error != 0)
    throw IoError(path_.string(), start + r.done,
                  "read of " + std::to_string(bytes - r.done) + " bytes at offset " + std::to_string(start + r.done) +
                      " failed: " + detail::errno_text(r.error));
  if (r.done < bytes)
    throw IoError(path_.string(), start + r.done,
                  "ended at offset " + std::to_string(start + r.done) + ", before the " + std::to_string(bytes) +
                      " bytes from offset " + std::to_string(start) + " (file is " +
                      std::to_string(detail::file_size(fd_, path_.string())) + " bytes now)");
}

}  // namespace sluice
