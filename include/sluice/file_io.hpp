#pragma once
// Files as pipeline spans: a file source reads items straight into pinned
// staging slots, a file sink writes results straight out of them, each with
// pread/pwrite on the staging threads in parallel pieces, so a file crosses
// host memory once. Host-only.
//
//   auto in  = p.input(sluice::from_file<float>("in.f32"));
//   auto out = p.output(sluice::to_file<float>("out.f32", n));
//
// Page cache or not: reads that the page cache serves ran at ~99 GB/s with 16
// threads on the test host, the disk under it at ~2 GB/s. `direct` (O_DIRECT)
// skips the cache; it pays only for files that are not cached and will not be
// read again, and falls back to cached I/O where the file system refuses it
// or an offset or size is not a multiple of 4096 bytes.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include "sluice/source.hpp"

namespace sluice {

// A file that could not be opened, read or written: names the file and the offset.
class IoError : public std::runtime_error {
 public:
  IoError(std::string path, std::uint64_t offset, const std::string& what);
  // The same failure with context put in front, e.g. "chunk 7 of 20 (items ...), stage stage-in".
  IoError(const IoError& cause, const std::string& context);
  const std::string& path() const noexcept { return path_; }
  std::uint64_t offset() const noexcept { return offset_; }

 private:
  std::string path_;
  std::uint64_t offset_;
};

struct FileOptions {
  std::uint64_t offset = 0;               // bytes before the first item (a header)
  std::optional<std::size_t> items;       // source: default, every whole item after `offset`
  bool direct = false;                    // O_DIRECT where allowed (see above)
};

class FileSource final : public Source {
 public:
  // Throws IoError, naming the file, when it cannot be opened or holds fewer
  // items than asked for; std::invalid_argument for item_bytes 0.
  FileSource(std::filesystem::path path, std::size_t item_bytes, FileOptions options = {});
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  std::size_t item_count() const override { return items_; }
  std::size_t item_bytes() const override { return item_bytes_; }
  std::string name() const override { return "file " + path_.string(); }
  bool splittable() const override { return true; }
  // Refuses a run when the file has shrunk below the items since it was opened.
  void begin_run() override;
  // Throws IoError naming the file and offset when a read fails or the file ends early.
  void read(ItemRange range, std::span<std::byte> pinned) override;

 private:
  std::filesystem::path path_;
  std::size_t item_bytes_;
  FileOptions options_;
  std::size_t items_ = 0;
  int fd_ = -1;
  int direct_fd_ = -1;  // -1 without direct I/O
};

class FileSink final : public Sink {
 public:
  // Creates the file (or opens it to overwrite). Throws IoError naming it when that fails.
  FileSink(std::filesystem::path path, std::size_t item_bytes, std::size_t items, FileOptions options = {});
  ~FileSink() override;
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  std::size_t item_count() const override { return items_; }
  std::size_t item_bytes() const override { return item_bytes_; }
  std::string name() const override { return "file " + path_.string(); }
  bool splittable() const override { return true; }
  // Sizes the file for every item, so pieces can be written at their offsets
  // in any order, reserving a new file's blocks where the file system can:
  // a disk too full for the output throws IoError here, before the first chunk.
  void begin_run() override;
  void write(ItemRange range, std::span<const std::byte> pinned) override;
  // Cuts the file after the last item written when the run failed.
  void end_run(bool completed, std::size_t items_done) override;

 private:
  std::filesystem::path path_;
  std::size_t item_bytes_;
  std::size_t items_;
  FileOptions options_;
  int fd_ = -1;
  int direct_fd_ = -1;
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
