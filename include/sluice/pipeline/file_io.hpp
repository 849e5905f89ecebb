#pragma once
// Files as pipeline spans: a file source reads items straight into pinned
// staging slots, a file sink writes results straight out of them, each with
// pread/pwrite on the staging threads in parallel pieces, so a file crosses
// host memory once. Host-only.
//
//   auto in  = p.input(sluice::from_file<float>("in.f32"));
//   auto out = p.output(sluice::to_file<float>("out.f32", n));
//
// An output is replaced, never half-written: the sink writes a new file
// beside its target ("out.f32.sluice-partial-XXXXXX"), and only when every
// chunk is in does it sync the new file, rename it over the target and sync
// the directory. A run that fails or is refused removes the new file; one
// killed midway leaves the target as it was (and its new file beside it, which
// the next run of that target removes: a writer holds its new file locked with
// flock(2) while it runs, so one nobody holds is a killed run's). Every write,
// sync, truncate and close error is an IoError naming the file.
//
// Page cache or not: reads that the page cache serves ran at ~99 GB/s with 16
// threads on the test host, the disk under it at ~2 GB/s. `direct` (O_DIRECT)
// skips the cache; it pays only for files that are not cached and will not be
// read again, and falls back to cached I/O where the file system refuses it
// or an offset or size is not a multiple of 4096 bytes.
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sluice/core/io_error.hpp"
#include "sluice/pipeline/source.hpp"

namespace sluice {

struct FileOptions {
  // Bytes before the first item (a header). A sink keeps the header of the file it replaces
  // (zeros where that file is shorter, or there is none).
  std::uint64_t offset = 0;
  std::optional<std::size_t> items;  // source: default, every item after `offset`
  bool direct = false;               // O_DIRECT where allowed (see above)
  // Source: bytes after `offset` that are not a whole number of items are refused (a file of
  // floats that is 4002 bytes long), unless this says to take the whole items and leave the
  // partial one out; FileSource::bytes_left_out() then says how many bytes were left.
  bool leave_partial_item = false;
  // Sink: write into the target itself, not a new file renamed over it. UNSAFE: a run that
  // fails or is killed leaves the target half-written (a failed run cuts it after the last
  // chunk written). For a target with no room for a second copy beside it.
  bool in_place = false;
};

class FileSource final : public Source {
 public:
  // Throws IoError, naming the file, when it cannot be opened, holds fewer items than asked for,
  // or ends in a partial item (see FileOptions::leave_partial_item); std::invalid_argument for
  // item_bytes 0.
  FileSource(std::filesystem::path path, std::size_t item_bytes, FileOptions options = {});
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  std::size_t item_count() const override { return items_; }
  std::size_t item_bytes() const override { return item_bytes_; }
  std::string name() const override { return "file " + path_.string(); }
  bool splittable() const override { return true; }
  // Bytes of the file after the items, when it was opened: the partial item that
  // `leave_partial_item` left out, or what follows the `items` asked for.
  std::uint64_t bytes_left_out() const { return bytes_left_out_; }
  // Whether the file system took O_DIRECT (only when `direct` asked for it): reads whose
  // offset, size and buffer are multiples of 4096 bytes then skip the page cache.
  bool reads_direct() const { return direct_fd_ >= 0; }
  // Each run reads the file its path names when the run begins. A file replaced since the last
  // run (renamed over, as a file sink replaces its target, or removed and written again) is
  // opened again, and refused unless it holds as many items as the source was made with (at
  // least `items`, when they were asked for). The file the source holds, changed in place, is
  // refused when it has shrunk below the items. A path that names no file refuses the run.
  // Each refusal is an IoError naming the file and its size, before the run's first chunk.
  void begin_run() override;
  // Throws IoError naming the file and offset when a read fails or the file ends early.
  void read(ItemRange range, std::span<std::byte> pinned) override;

 private:
  // Takes the file that now has the source's path in place of the one it holds, or refuses it.
  void reopen();

  std::filesystem::path path_;
  std::size_t item_bytes_;
  FileOptions options_;
  std::size_t items_ = 0;
  std::uint64_t bytes_left_out_ = 0;
  int fd_ = -1;
  int direct_fd_ = -1;  // -1 without direct I/O
  // The file that fd_ holds, to tell it from one renamed over its path.
  std::uint64_t device_ = 0;
  std::uint64_t inode_ = 0;
};

class FileSink final : public Sink {
 public:
  // Checks that the target's directory is there and writable, and that the target, where it
  // exists, is a regular file (symbolic links are followed: the file they name is replaced).
  // Throws IoError naming the file when not; changes nothing on disk.
  FileSink(std::filesystem::path path, std::size_t item_bytes, std::size_t items, FileOptions options = {});
  // A run neither committed nor abandoned is abandoned.
  ~FileSink() override;
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  std::size_t item_count() const override { return items_; }
  std::size_t item_bytes() const override { return item_bytes_; }
  std::string name() const override { return "file " + path_.string(); }
  bool splittable() const override { return true; }
  // First removes the new files that killed runs of this target left (those no live writer
  // holds; best effort: one it cannot remove stays, and the run goes on). Then creates the
  // run's new file beside the target, locked for the run, with the target's header and mode,
  // sized for every item (so that pieces can be written at their offsets in any order), its
  // blocks reserved where the file system can: a disk too full for the output throws IoError
  // here, before the first chunk. In place: opens (or creates) the target, reserving its
  // blocks without changing its size.
  void begin_run() override;
  // Thread-safe; pieces may come in any order. Throws IoError naming the file and offset.
  void write(ItemRange range, std::span<const std::byte> pinned) override;
  // Syncs the new file, renames it over the target and syncs the directory. An IoError
  // before the rename leaves the target as it was (the new file is removed); one from
  // syncing the directory after it says that the new file is already in place.
  // std::logic_error, naming the first items never written, when the run's writes left a gap.
  void commit() override;
  // Removes the run's new file. In place: cuts the target after the items written (unless
  // nothing was written: then the target is left alone, or removed if the run created it).
  void abandon(std::size_t items_done) noexcept override;

 private:
  void begin_new_file();
  void begin_in_place();
  void sync_and_close();
  void close_run_files() noexcept;
  std::string written_file() const;  // for messages: "its new file out.f32.sluice-partial-k3x9qa", "the file"

  std::filesystem::path path_;  // the target, as the caller named it (for messages)
  std::string file_name_;       // the target's name in its directory, symbolic links followed
  std::size_t item_bytes_;
  std::size_t items_;
  FileOptions options_;
  std::uint64_t bytes_;  // header and items
  int dir_fd_ = -1;      // the target's directory: the new file, the rename and its sync happen there
  // The run in progress.
  bool running_ = false;
  std::string new_name_;  // the new file's name in the directory; empty in place
  bool created_ = false;  // in place: begin_run created the target
  // The items the run wrote, as ranges in order that neither overlap nor touch: a range written
  // twice must not hide one never written, as a count of bytes would.
  std::mutex written_mutex_;
  std::vector<ItemRange> written_;
  int fd_ = -1;
  int direct_fd_ = -1;
  // The new file's lock (flock), held from its creation until it is renamed or removed: the same
  // open file as fd_, which commit closes before the rename. With the file's device and inode,
  // which mark it in use for the cleanups of this process's other sinks.
  int lock_fd_ = -1;
  bool live_ = false;
  std::uint64_t new_device_ = 0;
  std::uint64_t new_inode_ = 0;
};

template <typename T>
SourceOf<T> from_file(const std::filesystem::path& path, FileOptions options = {}) {
  return {std::make_shared<FileSource>(path, sizeof(T), options)};
}

template <typename T>
SinkOf<T> to_file(const std::filesystem::path& path, std::size_t items, FileOptions options = {}) {
  return {std::make_shared<FileSink>(path, sizeof(T), items, options)};
}

}  // namespace sluice
