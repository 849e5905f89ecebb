#include "sluice/pipeline/file_io.hpp"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "injected_faults.hpp"
#include "page_cache.hpp"

using sluice::FileOptions;
using sluice::FileSource;
using sluice::IoError;
using sluice::ItemRange;

namespace {

FileOptions with_offset(std::uint64_t offset) {
  FileOptions o;
  o.offset = offset;
  return o;
}
FileOptions with_items(std::size_t items) {
  FileOptions o;
  o.items = items;
  return o;
}
FileOptions direct() {
  FileOptions o;
  o.direct = true;
  return o;
}

class FileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("sluice-file-io-" + std::to_string(getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path write_ints(const std::string& name, std::size_t count, std::size_t header = 0) {
    const auto path = dir_ / name;
    std::ofstream out(path, std::ios::binary);
    std::vector<char> pad(header, 'h');
    out.write(pad.data(), static_cast<std::streamsize>(pad.size()));
    std::vector<std::int32_t> v(count);
    std::iota(v.begin(), v.end(), 0);
    out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(count * 4));
    return path;
  }
  std::filesystem::path dir_;
};

std::size_t open_descriptors() {
  return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"), {}));
}

std::vector<std::int32_t> read_range(FileSource& src, ItemRange r) {
  std::vector<std::int32_t> v(r.size());
  src.read(r, {reinterpret_cast<std::byte*>(v.data()), r.size() * 4});
  return v;
}

}  // namespace

TEST_F(FileIo, SourceReadsAnyRangeAfterAHeader) {
  const auto path = write_ints("a.bin", 1000, 1024);
  FileSource src(path, 4, with_offset(1024));
  EXPECT_EQ(src.item_count(), 1000u);
  EXPECT_TRUE(src.splittable());
  for (ItemRange r : {ItemRange{0, 1}, ItemRange{0, 1000}, ItemRange{999, 1000}, ItemRange{17, 417}}) {
    const auto v = read_range(src, r);
    for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<std::int32_t>(r.begin + i));
  }
}

TEST_F(FileIo, APartialLastItemIsRefusedUnlessLeftOutOnPurpose) {
  const auto path = dir_ / "odd.bin";
  std::ofstream(path, std::ios::binary) << std::string(4 * 1000 + 2, 'x');
  try {
    FileSource src(path, 4);
    FAIL() << "took " << src.item_count() << " items and dropped the 2 bytes after them";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("odd.bin: holds 4002 bytes after offset 0: 1000 items of 4 bytes and 2 bytes of a "
                                         "partial item at offset 4000"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("leave_partial_item"), std::string::npos) << e.what();
    EXPECT_EQ(e.offset(), 4000u);
  }
  FileOptions leave;
  leave.leave_partial_item = true;
  const FileSource left(path, 4, leave);
  EXPECT_EQ(left.item_count(), 1000u);
  EXPECT_EQ(left.bytes_left_out(), 2u);
  // A count asked for says where the items end: what follows them is no partial item.
  const FileSource counted(path, 4, with_items(900));
  EXPECT_EQ(counted.bytes_left_out(), 402u);
  EXPECT_EQ(FileSource(write_ints("even.bin", 10), 4).bytes_left_out(), 0u);
}

TEST_F(FileIo, MissingFileOrTooFewItemsNameTheFile) {
  try {
    FileSource src(dir_ / "missing.bin", 4);
    FAIL() << "opened a missing file";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.bin"), std::string::npos) << e.what();
  }
  const auto path = write_ints("short.bin", 10);
  try {
    FileSource src(path, 4, with_items(11));
    FAIL() << "accepted more items than the file holds";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("short.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("holds 10 items"), std::string::npos) << e.what();
  }
  try {
    FileSource src(path, 4, with_offset(41));
    FAIL() << "a header longer than the file was taken for 0 items";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("is 40 bytes, shorter than the 41-byte header"), std::string::npos) << e.what();
  }
  EXPECT_THROW(FileSource(path, 0), std::invalid_argument);
}

TEST_F(FileIo, ASourceThatRefusesItsFileClosesIt) {
  const auto path = write_ints("ten.bin", 10);
  std::ofstream(dir_ / "odd.bin", std::ios::binary) << "12345";
  const std::size_t before = open_descriptors();
  EXPECT_THROW(FileSource(path, 4, with_items(11)), IoError);
  EXPECT_THROW(FileSource(dir_ / "odd.bin", 4), IoError);
  {
    const sluice::test::InjectedFault fault(sluice::test::FileCall::fstat, EIO, dir_);
    EXPECT_THROW(FileSource(path, 4), IoError);
  }
  EXPECT_EQ(open_descriptors(), before) << "a refused file source left its file open";
}

TEST_F(FileIo, AFileTruncatedUnderTheSourceIsCaughtAtTheNextRunAndAtTheRead) {
  const auto path = write_ints("shrinks.bin", 1000);
  FileSource src(path, 4);
  src.begin_run();
  std::filesystem::resize_file(path, 400 * 4 + 2);
  try {
    src.begin_run();
    FAIL() << "a truncated file was accepted for a run";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  try {
    read_range(src, {300, 500});
    FAIL() << "a read past the end returned";
  } catch (const IoError& e) {
    EXPECT_EQ(e.offset(), 400u * 4 + 2);
    EXPECT_NE(std::string(e.what()).find("ended at offset 1602"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_range(src, {10, 20})[5], 15);  // what is still there reads fine
}

namespace {

// Writes `count` items i * 3 + 7 beside `path` and renames them over it, as a file sink replaces its target.
void replace_file(const std::filesystem::path& path, std::size_t count, std::size_t extra_bytes = 0) {
  const auto beside = path.parent_path() / ("." + path.filename().string() + ".new");
  {
    std::ofstream out(beside, std::ios::binary);
    for (std::size_t i = 0; i < count; ++i) {
      const auto v = static_cast<std::int32_t>(i * 3 + 7);
      out.write(reinterpret_cast<const char*>(&v), 4);
    }
    out << std::string(extra_bytes, 'x');
  }
  std::filesystem::rename(beside, path);
}

}  // namespace

TEST_F(FileIo, ASourceReadsTheFileRenamedOverItsPathAtTheNextRun) {
  const auto path = write_ints("a.bin", 1000);
  FileSource src(path, 4);
  src.begin_run();
  EXPECT_EQ(read_range(src, {10, 12}), (std::vector<std::int32_t>{10, 11}));
  replace_file(path, 1000);
  src.begin_run();
  EXPECT_EQ(read_range(src, {10, 12}), (std::vector<std::int32_t>{37, 40})) << "the run read the file that was replaced";
  EXPECT_EQ(src.item_count(), 1000u);
  // And again: each run takes the file the path names when it begins.
  std::filesystem::remove(path);
  write_ints("a.bin", 1000);
  src.begin_run();
  EXPECT_EQ(read_range(src, {999, 1000}), (std::vector<std::int32_t>{999}));
}

TEST_F(FileIo, AReplacementOfAnotherItemCountIsRefusedAtTheNextRun) {
  const auto path = write_ints("a.bin", 1000);
  FileSource src(path, 4);
  for (std::size_t items : {std::size_t{500}, std::size_t{1500}}) {
    replace_file(path, items);
    try {
      src.begin_run();
      FAIL() << "a run took a replacement of " << items << " items for 1000";
    } catch (const IoError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("a.bin: was replaced since the source was made, by a file of " + std::to_string(items * 4) +
                          " bytes: " + std::to_string(items) + " items of 4 bytes after offset 0, where the source was "
                          "made for 1000 items (4000 bytes)"),
                std::string::npos)
          << what;
      EXPECT_EQ(e.offset(), items * 4);
    }
  }
  replace_file(path, 1000, 2);  // a partial item, not to be left out
  EXPECT_THROW(src.begin_run(), IoError);
  replace_file(path, 1000);
  src.begin_run();
  EXPECT_EQ(read_range(src, {1, 2})[0], 10);
  // With a count asked for, a longer replacement holds the items: what follows them is left out.
  FileSource counted(path, 4, with_items(600));
  replace_file(path, 700, 3);
  counted.begin_run();
  EXPECT_EQ(counted.bytes_left_out(), 100u * 4 + 3);
  replace_file(path, 599);
  EXPECT_THROW(counted.begin_run(), IoError);
}

TEST_F(FileIo, ARemovedFileRefusesTheRun) {
  const auto path = write_ints("gone.bin", 100);
  FileSource src(path, 4);
  std::filesystem::remove(path);
  try {
    src.begin_run();
    FAIL() << "a run read a file that was removed";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("gone.bin: cannot stat: No such file"), std::string::npos) << e.what();
  }
}

TEST_F(FileIo, DirectIoReadsTheSameBytesOrFallsBack) {
  const auto path = write_ints("direct.bin", 4096 * 4);
  FileSource src(path, 4, direct());
  // Aligned or not, through O_DIRECT or the page cache: the same values.
  alignas(4096) static std::int32_t buffer[4096 * 4];
  src.read({1024, 1024 + 4096}, {reinterpret_cast<std::byte*>(buffer), 4096 * 4});
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(buffer[i], 1024 + i);
  const auto odd = read_range(src, {3, 10});
  EXPECT_EQ(odd[0], 3);
  EXPECT_FALSE(FileSource(path, 4).reads_direct());
}

TEST_F(FileIo, DirectReadsSkipThePageCache) {
  const auto path = write_ints("direct.bin", 4096 * 16);  // 256 KiB
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) GTEST_SKIP() << "the temporary directory's file system refuses O_DIRECT: " << std::strerror(errno);
    ::close(fd);
  }
  if (!sluice::test::drop_from_cache(path)) GTEST_SKIP() << "this file system keeps its files in the page cache (tmpfs)";
  FileSource src(path, 4, direct());
  EXPECT_TRUE(src.reads_direct());
  alignas(4096) static std::int32_t buffer[4096 * 16];
  src.read({0, 4096 * 16}, {reinterpret_cast<std::byte*>(buffer), sizeof(buffer)});
  for (int i = 0; i < 4096 * 16; ++i) ASSERT_EQ(buffer[i], i);
  EXPECT_EQ(sluice::test::cached_pages(path), 0u) << "the direct source's aligned read went through the page cache";
  // The same read without O_DIRECT fills the cache: the check above can tell the two apart.
  FileSource cached(path, 4);
  cached.read({0, 4096 * 16}, {reinterpret_cast<std::byte*>(buffer), sizeof(buffer)});
  EXPECT_GT(sluice::test::cached_pages(path), 0u);
}

TEST_F(FileIo, ContextKeepsPathAndOffset) {
  const IoError cause("/data/x.bin", 4096, "read failed");
  const IoError wrapped(cause, "chunk 3 of 9, stage stage-in");
  EXPECT_EQ(wrapped.path(), "/data/x.bin");
  EXPECT_EQ(wrapped.offset(), 4096u);
  EXPECT_EQ(std::string(wrapped.what()), "chunk 3 of 9, stage stage-in: /data/x.bin: read failed");
}
