#include "sluice/file_io.hpp"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

using sluice::FileOptions;
using sluice::FileSink;
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

TEST_F(FileIo, SourceCountsWholeItemsOnly) {
  const auto path = dir_ / "odd.bin";
  std::ofstream(path, std::ios::binary) << std::string(4 * 10 + 3, 'x');
  EXPECT_EQ(FileSource(path, 4).item_count(), 10u);
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
  EXPECT_THROW(FileSource(path, 0), std::invalid_argument);
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

TEST_F(FileIo, SinkWritesPiecesInAnyOrderAndCutsTheFileOnFailure) {
  const auto path = dir_ / "out.bin";
  FileSink sink(path, 4, 100, with_offset(8));
  sink.begin_run();
  std::vector<std::int32_t> v(100);
  std::iota(v.begin(), v.end(), 1000);
  auto put = [&](ItemRange r) { sink.write(r, {reinterpret_cast<const std::byte*>(v.data() + r.begin), r.size() * 4}); };
  put({50, 100});
  put({0, 50});
  sink.end_run(true, 100);
  EXPECT_EQ(std::filesystem::file_size(path), 8u + 400u);
  std::ifstream in(path, std::ios::binary);
  in.seekg(8);
  std::vector<std::int32_t> back(100);
  in.read(reinterpret_cast<char*>(back.data()), 400);
  EXPECT_EQ(back, v);
  // A failed run: nothing past the items that finished stays.
  sink.begin_run();
  sink.end_run(false, 30);
  EXPECT_EQ(std::filesystem::file_size(path), 8u + 30u * 4);
}

TEST_F(FileIo, SinkReservesANewFileAndCutsALongerOneBeforeTheRun) {
  const auto probe = dir_ / "probe.bin";
  {
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT, 0644);
    const bool can_reserve = ::fallocate(fd, 0, 0, 4096) == 0;
    ::close(fd);
    if (!can_reserve) GTEST_SKIP() << "the temporary directory's file system cannot reserve blocks (fallocate)";
  }
  const std::size_t items = std::size_t{1} << 20;  // 4 MiB of 4-byte items
  const auto path = dir_ / "new.bin";
  FileSink sink(path, 4, items);
  sink.begin_run();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), items * 4);
  EXPECT_GE(static_cast<std::size_t>(st.st_blocks) * 512, items * 4) << "the new file's blocks were not reserved";

  // A longer file keeps its header and loses what lies past the items.
  const auto longer = write_ints("longer.bin", 100, 8);
  FileSink over(longer, 4, 10, with_offset(8));
  over.begin_run();
  EXPECT_EQ(std::filesystem::file_size(longer), 8u + 40u);
  std::ifstream in(longer, std::ios::binary);
  std::string header(8, '\0');
  in.read(header.data(), 8);
  EXPECT_EQ(header, "hhhhhhhh");
}

TEST_F(FileIo, SinkNamesAFileItCannotCreate) {
  try {
    FileSink sink(dir_ / "no-such-dir" / "out.bin", 4, 10);
    FAIL() << "created a file in a missing directory";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-dir"), std::string::npos) << e.what();
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
}

TEST_F(FileIo, ContextKeepsPathAndOffset) {
  const IoError cause("/data/x.bin", 4096, "read failed");
  const IoError wrapped(cause, "chunk 3 of 9, stage stage-in");
  EXPECT_EQ(wrapped.path(), "/data/x.bin");
  EXPECT_EQ(wrapped.offset(), 4096u);
  EXPECT_EQ(std::string(wrapped.what()), "chunk 3 of 9, stage stage-in: /data/x.bin: read failed");
}
