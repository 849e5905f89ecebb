// The file sink: a run writes a new file beside its target and renames it over
// the target only once every chunk is in and synced, so the target is always
// either the previous file or the complete new one.
//
// A run killed before commit (preemption, the OOM killer) leaves its new file,
// the output's full size reserved. The next run of the same target removes
// those: a writer holds an exclusive flock(2) on its new file from just after
// creating it until it is renamed or removed, so a new file that nobody holds
// locked is one whose writer is gone.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "io/file_calls.hpp"
#include "io/read_fully.hpp"
#include "sluice/pipeline/file_io.hpp"

namespace sluice {

using detail::errno_text;

namespace {

// Less the umask, as the shell's redirections create files.
constexpr mode_t new_file_mode = 0666;

constexpr char partial_infix[] = ".sluice-partial-";
constexpr char suffix_letters[] = "abcdefghijklmnopqrstuvwxyz0123456789";
constexpr std::size_t suffix_length = 6;

// "out.f32.sluice-partial-": what the new files of the target `target_name` start with. At most
// 200 bytes of the target's name, so that the whole stays within NAME_MAX (255): two targets
// whose names share their first 200 bytes share their new files' names too (a run of one may
// then remove the other's stale new files, which are as useless to it).
std::string partial_prefix(const std::string& target_name) {
  return std::string(target_name, 0, 200).append(partial_infix);
}

// "out.f32.sluice-partial-k3x9qa": beside the target, named after it and not hidden, so that
// a file left by a run that was killed says where it came from and what it is.
std::string new_file_name(const std::string& target_name) {
  thread_local std::mt19937_64 random{std::random_device{}()};
  std::string name = partial_prefix(target_name);
  for (std::size_t i = 0; i < suffix_length; ++i) name += suffix_letters[random() % (sizeof(suffix_letters) - 1)];
  return name;
}

// Whether `name` is one that new_file_name gives for a target whose names start with `prefix`:
// only those are ever removed, so that a file of the user's named alike stays.
bool is_partial_name(const std::string& name, const std::string& prefix) {
  if (name.size() != prefix.size() + suffix_length || name.compare(0, prefix.size(), prefix) != 0) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  });
}

// The new files this process's sinks are writing, by device and inode. flock alone would do
// on a local file system, where two descriptions of one file conflict even in one process;
// NFS emulates flock with POSIX record locks, which never conflict within a process, and
// which any close of the file in that process drops: there a cleanup would take the lock of
// a run in progress in its own process and remove its file. Those files are never opened.
struct LiveFiles {
  std::mutex mutex;
  std::set<std::pair<dev_t, ino_t>> files;
};
LiveFiles& live_files() {
  static LiveFiles live;
  return live;
}

bool is_live(dev_t device, ino_t inode) {
  LiveFiles& live = live_files();
  const std::lock_guard lock(live.mutex);
  return live.files.count({device, inode}) != 0;
}

void set_live(dev_t device, ino_t inode, bool on) {
  LiveFiles& live = live_files();
  const std::lock_guard lock(live.mutex);
  if (on)
    live.files.insert({device, inode});
  else
    live.files.erase({device, inode});
}

// Takes the writer's lock on its new file `new_name`, just created, through `lock_fd` (a
// descriptor of it), and says whether the run may keep the file. Not when another process's
// cleanup got to it between the create and the lock and removed it: the caller then makes
// another. A cleanup holds a lock for an unlink only, so the lock is waited for, but not
// blocked on: a process that forked meanwhile would hold that cleanup's lock for as long as its
// child lives; after a second, this name is given up (removed here: the file is this run's,
// made with O_EXCL). Where the file system has no flock, the file goes unlocked: no cleanup can
// lock it either, so none removes it. `st`: the file's device and inode.
bool lock_new_file(int dir_fd, int lock_fd, const std::string& path, const std::string& new_name, struct stat& st) {
  for (int waited_ms = 0;; ++waited_ms) {
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) == 0) break;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) break;  // no flock on this file system
    if (::fstat(lock_fd, &st) == 0 && st.st_nlink == 0) return false;
    if (waited_ms == 1000) {
      ::unlinkat(dir_fd, new_name.c_str(), 0);
      return false;
    }
    ::usleep(1000);
  }
  if (::fstat(lock_fd, &st) != 0)
    throw IoError(path, 0, "cannot stat its new file " + new_name + ": " + errno_text(errno));
  return st.st_nlink > 0;
}

// Removes the new files that runs of the target `target_name` left in the directory `dir_fd`
// and that no writer holds (their runs were killed). Best effort: a file it cannot open, lock
// or remove (gone already, another user's, in use) stays, and the run goes on.
//
// An earlier version named its new files ".NAME.sluice-XXXXXX" (hidden) and took no lock, so
// that one of those being written by a process still running that version looks the same as
// one a killed run left: they are left alone (a user may remove them when no such process runs).
void remove_stale_new_files(int dir_fd, const std::string& target_name) noexcept {
  try {
    const std::string prefix = partial_prefix(target_name);
    std::vector<std::string> names;
    {
      // A descriptor of its own: closedir closes it, and reading moves its offset.
      const int listing_fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (listing_fd < 0) return;
      DIR* dir = ::fdopendir(listing_fd);
      if (dir == nullptr) {
        ::close(listing_fd);
        return;
      }
      while (const dirent* entry = ::readdir(dir))
        if (is_partial_name(entry->d_name, prefix)) names.emplace_back(entry->d_name);
      ::closedir(dir);
    }
    for (const std::string& name : names) {
      struct stat seen {};
      if (::fstatat(dir_fd, name.c_str(), &seen, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(seen.st_mode) ||
          is_live(seen.st_dev, seen.st_ino))
        continue;
      // O_NONBLOCK: a FIFO put there since the look does not hang the open.
      detail::DescriptorGuard fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
      if (fd.get() < 0) continue;
      if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // a live writer's (or no flock here)
      // Looked at once locked: another cleanup may have removed it before letting go of it.
      struct stat held {}, now {};
      if (::fstat(fd.get(), &held) != 0 || !S_ISREG(held.st_mode) || held.st_nlink == 0) continue;
      // Removed only while the name still names the file locked, not one put there since.
      if (::fstatat(dir_fd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0 || now.st_dev != held.st_dev ||
          now.st_ino != held.st_ino)
        continue;
      ::unlinkat(dir_fd, name.c_str(), 0);  // failing (another user's file, say), it stays; the lock goes with `fd`
    }
  } catch (...) {
    // Out of memory for the names: the stale files stay, and the run goes on.
  }
}

// Reserves blocks up to `size` where the file system can (fallocate); where it
// cannot, the writes allocate as they go. A disk too full for the output is an
// error here, before the run starts. `keep_size`: reserve without changing the
// size that readers see (the target itself, written in place).
void reserve_blocks(int fd, const std::string& path, std::uint64_t size, bool keep_size) {
#ifdef __linux__
  if (size == 0) return;
  if (::fallocate(fd, keep_size ? FALLOC_FL_KEEP_SIZE : 0, 0, static_cast<off_t>(size)) == 0) return;
  if (errno == ENOSPC || errno == EFBIG || errno == EDQUOT)
    throw IoError(path, 0, "cannot reserve " + std::to_string(size) + " bytes for the output: " + errno_text(errno));
#else
  (void)fd;
  (void)path;
  (void)size;
  (void)keep_size;
#endif
}

void pwrite_fully(int fd, const std::byte* data, std::size_t bytes, std::uint64_t start, const std::string& path,
                  const std::string& into) {
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t put = ::pwrite(fd, data + done, bytes - done, static_cast<off_t>(start + done));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0)
      throw IoError(path, start + done,
                    "write of " + std::to_string(bytes - done) + " bytes at offset " + std::to_string(start + done) + " into " +
                        into + " failed: " + (put < 0 ? errno_text(errno) : std::string("nothing was written")));
    done += static_cast<std::size_t>(put);
  }
}

bool is_regular(const struct stat& st) { return S_ISREG(st.st_mode); }

// Adds `r` to `ranges` (in order, neither overlapping nor touching), merging it with those it meets.
void add_range(std::vector<ItemRange>& ranges, ItemRange r) {
  if (r.size() == 0) return;
  auto first = std::lower_bound(ranges.begin(), ranges.end(), r.begin,
                                [](const ItemRange& have, std::size_t begin) { return have.end < begin; });
  auto last = first;
  for (; last != ranges.end() && last->begin <= r.end; ++last) {
    r.begin = std::min(r.begin, last->begin);
    r.end = std::max(r.end, last->end);
  }
  ranges.insert(ranges.erase(first, last), r);
}

// The first items of [0, items) that `ranges` leave out; empty when none.
ItemRange first_missing(const std::vector<ItemRange>& ranges, std::size_t items) {
  std::size_t from = 0;
  for (const ItemRange& r : ranges) {
    if (r.begin > from) return {from, r.begin};
    from = std::max(from, r.end);
  }
  return from < items ? ItemRange{from, items} : ItemRange{};
}

std::size_t items_in(const std::vector<ItemRange>& ranges) {
  std::size_t n = 0;
  for (const ItemRange& r : ranges) n += r.size();
  return n;
}

}  // namespace

FileSink::FileSink(std::filesystem::path path, std::size_t item_bytes, std::size_t items, FileOptions options)
    : path_(std::move(path)), item_bytes_(item_bytes), items_(items), options_(options) {
  if (item_bytes == 0) throw std::invalid_argument("file sink: item size must be at least 1 byte");
  if (items > (UINT64_MAX - options_.offset) / item_bytes)
    throw std::invalid_argument("file sink: " + std::to_string(items) + " items of " + std::to_string(item_bytes) +
                                " bytes after a header of " + std::to_string(options_.offset) + " bytes pass 2^64 bytes");
  bytes_ = options_.offset + std::uint64_t{items} * item_bytes;
  const std::string name = path_.string();
  // A symbolic link names the file to write: that file is replaced, and the link keeps pointing at it.
  std::filesystem::path target = path_;
  std::error_code ec;
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(path_, ec))) {
    std::filesystem::path resolved = std::filesystem::canonical(path_, ec);
    if (!ec) target = std::move(resolved);  // a dangling link is replaced itself
  }
  file_name_ = target.filename().string();
  if (file_name_.empty() || file_name_ == "." || file_name_ == "..")
    throw IoError(name, 0, "names a directory, not a file to write");
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  detail::DescriptorGuard dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) throw IoError(name, 0, "cannot open its directory " + dir.string() + ": " + errno_text(errno));
  if (::faccessat(dir_fd.get(), ".", W_OK | X_OK, AT_EACCESS) != 0)
    throw IoError(name, 0, "cannot create files in its directory " + dir.string() + ": " + errno_text(errno));
  struct stat st {};
  if (::fstatat(dir_fd.get(), file_name_.c_str(), &st, 0) == 0) {
    if (!is_regular(st)) throw IoError(name, 0, "is not a regular file; a file sink writes regular files only");
    // Replacing a file the caller may not write would bypass its permissions.
    if (::faccessat(dir_fd.get(), file_name_.c_str(), W_OK, AT_EACCESS) != 0)
      throw IoError(name, 0, "cannot be written: " + errno_text(errno));
  } else if (errno != ENOENT) {
    throw IoError(name, 0, "cannot stat: " + errno_text(errno));
  }
  dir_fd_ = dir_fd.release();
}

FileSink::~FileSink() {
  if (running_) {
    if (options_.in_place) {
      std::fprintf(stderr, "sluice: %s: destroyed with a run neither committed nor abandoned; the file is as that run left it\n",
                   path_.c_str());
      close_run_files();
      running_ = false;
    } else {
      abandon(0);
    }
  }
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

std::string FileSink::written_file() const { return new_name_.empty() ? "the file" : "its new file " + new_name_; }

void FileSink::begin_run() {
  if (running_) throw std::logic_error(name() + ": begin_run while the last run is open: commit or abandon it first");
  written_.clear();
  created_ = false;
  // Before this run's own file is made and its blocks reserved, so that the space they held is free for it.
  remove_stale_new_files(dir_fd_, file_name_);
  if (options_.in_place)
    begin_in_place();
  else
    begin_new_file();
  running_ = true;
}

void FileSink::begin_new_file() {
  const std::string name = path_.string();
  struct stat target {};
  const bool exists = ::fstatat(dir_fd_, file_name_.c_str(), &target, 0) == 0;
  if (!exists && errno != ENOENT) throw IoError(name, 0, "cannot stat: " + errno_text(errno));
  if (exists && !is_regular(target)) throw IoError(name, 0, "is not a regular file; a file sink writes regular files only");
  for (int attempt = 0; fd_ < 0; ++attempt) {
    new_name_ = new_file_name(file_name_);
    fd_ = ::openat(dir_fd_, new_name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, new_file_mode);
    if (fd_ < 0) {
      if (errno == EEXIST && attempt < 100) continue;
      const int code = errno;
      const std::string tried = new_name_;
      new_name_.clear();
      throw IoError(name, 0, "cannot create its new file " + tried + " beside it: " + errno_text(code));
    }
    // The lock is held through a descriptor of its own, the same open file as fd_: it lasts past
    // fd_'s close at commit, until the new file is renamed over the target.
    lock_fd_ = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
    struct stat st {};
    bool kept = false;
    try {
      if (lock_fd_ < 0)
        throw IoError(name, 0, "cannot open a descriptor to lock its new file " + new_name_ + ": " + errno_text(errno));
      kept = lock_new_file(dir_fd_, lock_fd_, name, new_name_, st);
    } catch (...) {
      ::unlinkat(dir_fd_, new_name_.c_str(), 0);
      close_run_files();
      new_name_.clear();
      throw;
    }
    if (!kept) {
      close_run_files();  // another process's cleanup took it before the lock: another name
      if (attempt == 100) throw IoError(name, 0, "cannot keep a new file beside it: each one made was taken at once");
      continue;
    }
    new_device_ = st.st_dev;
    new_inode_ = st.st_ino;
    set_live(st.st_dev, st.st_ino, true);
    live_ = true;
  }
  try {
    if (exists && options_.offset > 0) {
      // The header the target holds goes into the new file; the rest of a header it lacks stays zero.
      const std::uint64_t header = std::min<std::uint64_t>(options_.offset, static_cast<std::uint64_t>(target.st_size));
      detail::DescriptorGuard in(::openat(dir_fd_, file_name_.c_str(), O_RDONLY | O_CLOEXEC));
      if (in.get() < 0) throw IoError(name, 0, "cannot open to copy its header: " + errno_text(errno));
      std::vector<std::byte> bytes(static_cast<std::size_t>(header));
      const detail::ReadOutcome r = detail::read_fully(in.get(), bytes.data(), bytes.size(), 0);
      if (r.error != 0 || r.done < bytes.size())
        throw IoError(name, r.done,
                      "cannot read its " + std::to_string(header) + "-byte header: " +
                          (r.error != 0 ? errno_text(r.error) : "the file ended at offset " + std::to_string(r.done)));
      pwrite_fully(fd_, bytes.data(), bytes.size(), 0, name, written_file());
    }
    // The new file's blocks are reserved before the run: on ext4 the pipeline wrote
    // 2 GiB into a preallocated file 15 % faster than into a sparse one (docs/measurements.md).
    reserve_blocks(fd_, name, bytes_, false);
    if (::ftruncate(fd_, static_cast<off_t>(bytes_)) != 0)
      throw IoError(name, bytes_,
                    "cannot size its new file " + new_name_ + " to " + std::to_string(bytes_) + " bytes: " + errno_text(errno));
    if (options_.direct) direct_fd_ = detail::open_direct_at(dir_fd_, new_name_, O_WRONLY);
    if (exists) {
      // The replacement keeps the target's mode, and its owner where this process may set it:
      // where it may not (only root may give a file away), the new file is the writer's.
      if (::fchown(fd_, target.st_uid, target.st_gid) != 0 && errno != EPERM)
        throw IoError(name, 0, "cannot give its new file " + new_name_ + " the target's owner: " + errno_text(errno));
      if (::fchmod(fd_, target.st_mode & 07777) != 0)
        throw IoError(name, 0, "cannot give its new file " + new_name_ + " the target's mode: " + errno_text(errno));
    }
  } catch (...) {
    // Removed while still locked: a name no longer held could be another run's by now.
    ::unlinkat(dir_fd_, new_name_.c_str(), 0);
    close_run_files();
    new_name_.clear();
    throw;
  }
}

void FileSink::begin_in_place() {
  const std::string name = path_.string();
  fd_ = ::openat(dir_fd_, file_name_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0 && errno == ENOENT) {
    fd_ = ::openat(dir_fd_, file_name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, new_file_mode);
    created_ = fd_ >= 0;
  }
  if (fd_ < 0) throw IoError(name, 0, "cannot open for writing: " + errno_text(errno));
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw IoError(name, 0, "cannot stat: " + errno_text(errno));
    if (!is_regular(st)) throw IoError(name, 0, "is not a regular file; a file sink writes regular files only");
    // Readers see the file's size unchanged until the run writes.
    reserve_blocks(fd_, name, bytes_, true);
    if (options_.direct) direct_fd_ = detail::open_direct_at(dir_fd_, file_name_, O_WRONLY);
  } catch (...) {
    close_run_files();
    if (created_) ::unlinkat(dir_fd_, file_name_.c_str(), 0);
    created_ = false;
    throw;
  }
}

void FileSink::write(ItemRange range, std::span<const std::byte> pinned) {
  if (!running_) throw std::logic_error(name() + ": write outside a run: begin_run first");
  const std::uint64_t start = options_.offset + std::uint64_t{range.begin} * item_bytes_;
  const std::size_t bytes = range.size() * item_bytes_;
  if (range.end > items_ || pinned.size() < bytes)
    throw std::invalid_argument(name() + ": write of items " + std::to_string(range.begin) + ".." +
                                std::to_string(range.end) + " from " + std::to_string(pinned.size()) +
                                " bytes, for a file of " + std::to_string(items_) + " items");
  const int fd = detail::direct_ok(direct_fd_, start, bytes, pinned.data()) ? direct_fd_ : fd_;
  {
    // Taken before the write: a write that fails halfway has changed the file too.
    const std::lock_guard lock(written_mutex_);
    add_range(written_, range);
  }
  pwrite_fully(fd, pinned.data(), bytes, start, path_.string(), written_file());
}

void FileSink::sync_and_close() {
  const std::string name = path_.string();
  if (direct_fd_ >= 0) {
    const int fd = direct_fd_;
    direct_fd_ = -1;
    if (::close(fd) != 0) throw IoError(name, 0, "closing " + written_file() + " failed: " + errno_text(errno));
  }
  if (::fsync(fd_) != 0) throw IoError(name, 0, "syncing " + written_file() + " failed: " + errno_text(errno));
  const int fd = fd_;
  fd_ = -1;
  // Linux releases the descriptor even when close fails; the error (NFS: a write
  // the server refused) still means the data did not all land.
  if (::close(fd) != 0) throw IoError(name, 0, "closing " + written_file() + " failed: " + errno_text(errno));
}

void FileSink::commit() {
  if (!running_) throw std::logic_error(name() + ": commit without begin_run");
  const std::string name = path_.string();
  try {
    if (const ItemRange gap = first_missing(written_, items_); gap.size() != 0)
      throw std::logic_error(this->name() + ": commit with items " + std::to_string(gap.begin) + ".." +
                             std::to_string(gap.end) + " never written (the run wrote " +
                             std::to_string(items_in(written_)) + " of its " + std::to_string(items_) +
                             " items); the output would have a gap");
    // In place, a longer file loses what lies past the items.
    if (options_.in_place && ::ftruncate(fd_, static_cast<off_t>(bytes_)) != 0)
      throw IoError(name, bytes_, "cannot cut the file at " + std::to_string(bytes_) + " bytes: " + errno_text(errno));
    sync_and_close();
    if (!options_.in_place && ::renameat(dir_fd_, new_name_.c_str(), dir_fd_, file_name_.c_str()) != 0)
      throw IoError(name, 0, "cannot rename its new file " + new_name_ + " over it: " + errno_text(errno));
  } catch (...) {
    // The target is as it was (in place: as the run left it).
    if (!options_.in_place) ::unlinkat(dir_fd_, new_name_.c_str(), 0);
    close_run_files();
    new_name_.clear();
    running_ = false;
    throw;
  }
  close_run_files();  // the lock, held until the rename
  new_name_.clear();
  running_ = false;
  // The rename (or a new file's name) lasts through a crash only once the directory is synced.
  // Some file systems cannot sync a directory (EINVAL): there the rename is as durable as it gets.
  if (::fsync(dir_fd_) != 0 && errno != EINVAL)
    throw IoError(name, 0,
                  "is replaced by the new file, but syncing its directory failed (" + errno_text(errno) +
                      "): a crash now may bring back the previous file");
}

void FileSink::close_run_files() noexcept {
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (fd_ >= 0) ::close(fd_);
  direct_fd_ = fd_ = -1;
  // The new file's lock: the file is renamed, removed, or was never whole.
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  if (live_) set_live(static_cast<dev_t>(new_device_), static_cast<ino_t>(new_inode_), false);
  live_ = false;
}

void FileSink::abandon(std::size_t items_done) noexcept {
  if (!running_) return;
  running_ = false;
  if (!options_.in_place) {
    // Removed while still locked, as in begin_new_file.
    if (::unlinkat(dir_fd_, new_name_.c_str(), 0) != 0 && errno != ENOENT)
      std::fprintf(stderr, "sluice: %s: could not remove the failed run's new file %s: %s\n", path_.c_str(),
                   new_name_.c_str(), errno_text(errno).c_str());
    close_run_files();
    new_name_.clear();
    return;
  }
  if (!written_.empty()) {
    // Nothing past the last finished chunk stays in the file.
    const std::uint64_t keep = options_.offset + std::uint64_t{items_done} * item_bytes_;
    if (::ftruncate(fd_, static_cast<off_t>(keep)) != 0)
      std::fprintf(stderr, "sluice: %s: could not cut the file after the failed run's %zu items: %s\n", path_.c_str(),
                   items_done, errno_text(errno).c_str());
  }
  close_run_files();
  if (written_.empty() && created_ && ::unlinkat(dir_fd_, file_name_.c_str(), 0) != 0)
    std::fprintf(stderr, "sluice: %s: could not remove the file the failed run created: %s\n", path_.c_str(),
                 errno_text(errno).c_str());
}

}  // namespace sluice
