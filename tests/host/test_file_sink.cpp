// The file sink: its target is the previous file until commit, the complete
// new one after it, and every error on the way is an IoError naming the file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "file_run.hpp"
#include "page_cache.hpp"
#include "scratch_dir.hpp"
#include "sluice/pipeline/file_io.hpp"

using sluice::FileOptions;
using sluice::FileSink;
using sluice::IoError;
using sluice::ItemRange;
using namespace sluice::test;

namespace {

void put(FileSink& sink, const std::vector<std::uint32_t>& items, ItemRange range) {
  sink.write(range, std::as_bytes(std::span(items.data() + range.begin, range.size())));
}

// Why commit() refused, or "committed" where it did not.
std::string commit_refusal(FileSink& sink) {
  try {
    sink.commit();
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "committed";
}

FileOptions in_place() {
  FileOptions o;
  o.in_place = true;
  return o;
}

FileOptions with_offset(std::uint64_t offset) {
  FileOptions o;
  o.offset = offset;
  return o;
}

// The names in `dir` other than `expected`: files a run left behind.
std::vector<std::string> left_behind(const std::filesystem::path& dir, const std::vector<std::string>& expected) {
  std::vector<std::string> extra;
  for (const auto& name : names_in(dir))
    if (std::find(expected.begin(), expected.end(), name) == expected.end()) extra.push_back(name);
  return extra;
}

mode_t mode_of(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("cannot stat " + path.string());
  return st.st_mode & 07777;
}

template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const IoError& e) {
    return e.what();
  }
  return "no IoError";
}

}  // namespace

TEST(FileSink, TheTargetChangesOnlyAtCommit) {
  ScratchDir dir;
  const auto target = dir / "out.bin";
  const auto old = pattern(1000, 1), next = pattern(300, 2);
  write_items(target, old);
  FileSink sink(target, 4, 300);
  EXPECT_EQ(difference(target, as_bytes(old)), "") << "making the sink changed its target";
  sink.begin_run();
  const auto beside = left_behind(dir.path(), {"out.bin"});
  ASSERT_EQ(beside.size(), 1u) << "no new file beside the target";
  // Named for its target and not hidden, so that one a killed run left says what it is.
  EXPECT_EQ(beside[0].rfind("out.bin.sluice-partial-", 0), 0u) << beside[0];
  put(sink, next, {150, 300});  // pieces in any order
  put(sink, next, {0, 150});
  EXPECT_EQ(difference(target, as_bytes(old)), "") << "the target changed before commit";
  sink.commit();
  EXPECT_EQ(difference(target, as_bytes(next)), "");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.bin"});

  // The sink runs again: the next run replaces this one's file.
  const auto third = pattern(300, 3);
  sink.begin_run();
  put(sink, third, {0, 300});
  sink.commit();
  EXPECT_EQ(difference(target, as_bytes(third)), "");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.bin"});
}

TEST(FileSink, ARunRemovesTheNewFilesKilledRunsOfItsTargetLeftButNoneInUse) {
  // A run killed before commit leaves its new file, the output's full size (tests/host/
  // test_file_run_killed.cpp kills real ones). Made by hand here: nothing holds them.
  ScratchDir dir;
  const auto target = dir / "out.bin";
  const auto old = pattern(1000, 1), next = pattern(300, 2), other = pattern(200, 3);
  write_items(target, old);
  // Not this target's, or not what a sink names its new files: left alone.
  const std::vector<std::string> kept = {
      "other.bin.sluice-partial-k3x9qa",   // another target's
      ".out.bin.sluice-k3x9qa",            // an earlier version's (its writers took no lock: it may be in use)
      "out.bin.sluice-partial-notes.txt",  // a name of the user's
      "xout.bin.sluice-partial-k3x9qa",    // another target's
      "out.bin.sluice-partial-lnk123",     // a symbolic link, to a file that stays as it is
      "out.bin.sluice-partial-dir123"};    // a directory
  for (std::size_t i = 0; i < 4; ++i) write_items(dir / kept[i], pattern(10, 5));
  write_items(dir / "linked.bin", pattern(10, 6));
  std::filesystem::create_symlink("linked.bin", dir / kept[4]);
  std::filesystem::create_directory(dir / kept[5]);

  // Another sink's run of the same target is in progress: its new file is in use.
  FileSink first(target, 4, 200);
  first.begin_run();
  auto known = kept;
  known.insert(known.end(), {"out.bin", "linked.bin"});
  const auto in_use = left_behind(dir.path(), known);
  ASSERT_EQ(in_use.size(), 1u) << "the first run made no new file, or more than one";
  for (const char* stale : {"out.bin.sluice-partial-k3x9qa", "out.bin.sluice-partial-000000"})
    write_items(dir / stale, pattern(5000, 4));
  put(first, other, {0, 100});

  FileSink second(target, 4, 300);
  second.begin_run();
  put(second, next, {0, 300});
  second.commit();
  EXPECT_EQ(difference(target, as_bytes(next)), "");
  auto expected = kept;
  expected.insert(expected.end(), {"out.bin", "linked.bin", in_use[0]});
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names_in(dir.path()), expected) << "the stale new files stayed, or a file not stale went";
  EXPECT_EQ(difference(dir / "linked.bin", as_bytes(pattern(10, 6))), "");

  // The run in progress goes on as if nothing happened.
  put(first, other, {100, 200});
  first.commit();
  EXPECT_EQ(difference(target, as_bytes(other)), "");
  std::erase(expected, in_use[0]);
  EXPECT_EQ(names_in(dir.path()), expected);

  // A run in place removes them too.
  write_items(dir / "out.bin.sluice-partial-zz99zz", pattern(5000, 4));
  FileSink in_place_sink(target, 4, 300, in_place());
  in_place_sink.begin_run();
  put(in_place_sink, next, {0, 300});
  in_place_sink.commit();
  EXPECT_EQ(names_in(dir.path()), expected);
}

TEST(FileSink, ARunRefusedAfterBeginRunLeavesTheTargetAsItWas) {
  // Another span refuses the run after this sink began: the 4000-byte output stays 4000 bytes.
  ScratchDir dir;
  const auto target = dir / "out.bin";
  const auto old = pattern(1000, 1);
  write_items(target, old);
  FileSink sink(target, 4, 100);
  sink.begin_run();
  sink.abandon(0);
  EXPECT_EQ(difference(target, as_bytes(old)), "");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.bin"});
  sink.abandon(0);  // twice: nothing more happens

  // A target that was not there is not made.
  FileSink fresh(dir / "new.bin", 4, 10);
  fresh.begin_run();
  fresh.abandon(0);
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.bin"});
}

TEST(FileSink, AFailedRunLeavesTheTargetAsItWas) {
  ScratchDir dir;
  const auto target = dir / "out.bin";
  const auto old = pattern(1000, 1), next = pattern(100, 2);
  write_items(target, old);
  {
    FileSink sink(target, 4, 100);
    sink.begin_run();
    put(sink, next, {0, 30});
    put(sink, next, {30, 60});
    sink.abandon(60);
    EXPECT_EQ(difference(target, as_bytes(old)), "");
    EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.bin"});
  }
  {
    // A sink destroyed in the middle of a run abandons it.
    FileSink sink(target, 4, 100);
    sink.begin_run();
    put(sink, next, {0, 30});
  }
  EXPECT_EQ(difference(target, as_bytes(old)), "");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.bin"});
}

TEST(FileSink, CommitRefusesAnOutputWithAGap) {
  ScratchDir dir;
  const auto target = dir / "out.bin";
  const auto old = pattern(10, 1), next = pattern(100, 2);
  write_items(target, old);
  FileSink sink(target, 4, 100);
  sink.begin_run();
  put(sink, next, {0, 50});
  const std::string refusal = commit_refusal(sink);  // 50 of 100 items written
  EXPECT_NE(refusal.find("items 50..100 never written (the run wrote 50 of its 100 items)"), std::string::npos)
      << refusal;
  EXPECT_EQ(difference(target, as_bytes(old)), "");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.bin"});
  EXPECT_THROW(sink.commit(), std::logic_error);  // the run is over
  EXPECT_THROW(put(sink, next, {0, 10}), std::logic_error);
}

TEST(FileSink, ARangeWrittenTwiceDoesNotHideOneNeverWritten) {
  ScratchDir dir;
  const auto target = dir / "out.bin";
  const auto old = pattern(10, 1), next = pattern(100, 2);
  write_items(target, old);
  FileSink sink(target, 4, 100);
  sink.begin_run();
  // As many bytes as the output holds, in pieces out of order, items 70..80 twice and 30..40 never.
  for (ItemRange r : {ItemRange{40, 80}, ItemRange{0, 20}, ItemRange{70, 80}, ItemRange{80, 100}, ItemRange{20, 30}})
    put(sink, next, r);
  const std::string refusal = commit_refusal(sink);  // items 30..40 never written
  EXPECT_NE(refusal.find("items 30..40 never written (the run wrote 90 of its 100 items)"), std::string::npos)
      << refusal;
  EXPECT_EQ(difference(target, as_bytes(old)), "");
  // Every item written, some of them twice: the run commits.
  sink.begin_run();
  for (ItemRange r : {ItemRange{50, 100}, ItemRange{0, 60}, ItemRange{10, 20}}) put(sink, next, r);
  sink.commit();
  EXPECT_EQ(difference(target, as_bytes(next)), "");
}

TEST(FileSink, KeepsTheHeaderAndModeOfTheFileItReplaces) {
  ScratchDir dir;
  const auto target = dir / "out.bin";
  {
    std::ofstream out(target, std::ios::binary);
    out << "hhhhhhhh" << std::string(400, 'x');
  }
  std::filesystem::permissions(target, std::filesystem::perms(0640));
  const auto next = pattern(10, 2);
  FileSink sink(target, 4, 10, with_offset(8));
  sink.begin_run();
  put(sink, next, {0, 10});
  sink.commit();
  const auto bytes = file_bytes(target);
  ASSERT_EQ(bytes.size(), 8u + 40u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), 8), "hhhhhhhh");
  EXPECT_EQ(std::memcmp(bytes.data() + 8, next.data(), 40), 0);
  EXPECT_EQ(mode_of(target), 0640u);

  // A target shorter than its header keeps what it has; the rest of the header is zeros, as in a new file.
  {
    std::ofstream out(target, std::ios::binary | std::ios::trunc);
    out << "hhh";
  }
  sink.begin_run();
  put(sink, next, {0, 10});
  sink.commit();
  const auto shorter = file_bytes(target);
  ASSERT_EQ(shorter.size(), 48u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(shorter.data()), 8), std::string("hhh\0\0\0\0\0", 8));
}

TEST(FileSink, ReservesTheNewFilesBlocksBeforeTheFirstChunk) {
  ScratchDir dir;
  {
    const auto probe = dir / "probe.bin";
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT, 0644);
    const bool can_reserve = ::fallocate(fd, 0, 0, 4096) == 0;
    ::close(fd);
    std::filesystem::remove(probe);
    if (!can_reserve) GTEST_SKIP() << "the temporary directory's file system cannot reserve blocks (fallocate)";
  }
  const std::size_t items = std::size_t{1} << 20;  // 4 MiB of 4-byte items
  FileSink sink(dir / "new.bin", 4, items);
  sink.begin_run();
  const auto beside = left_behind(dir.path(), {});
  ASSERT_EQ(beside.size(), 1u);
  EXPECT_NE(beside[0], "new.bin") << "the target was made before the run committed";
  struct stat st {};
  ASSERT_EQ(::stat((dir / beside[0]).c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), items * 4);
  EXPECT_GE(static_cast<std::size_t>(st.st_blocks) * 512, items * 4) << "the new file's blocks were not reserved";
  sink.abandon(0);
}

TEST(FileSink, RefusesTargetsItCannotReplaceBeforeTheRun) {
  ScratchDir dir;
  EXPECT_NE(error_of([&] { FileSink(dir / "no-such-dir" / "out.bin", 4, 10); }).find("no-such-dir"), std::string::npos);
  std::filesystem::create_directory(dir / "a-dir");
  const std::string not_regular = "is not a regular file";
  EXPECT_NE(error_of([&] { FileSink(dir / "a-dir", 4, 10); }).find(not_regular), std::string::npos);
  EXPECT_NE(error_of([&] { FileSink(dir.path().string() + "/", 4, 10); }).find("names a directory"), std::string::npos);
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  EXPECT_NE(error_of([&] { FileSink(dir / "fifo", 4, 10); }).find(not_regular), std::string::npos);
  EXPECT_NE(error_of([&] { FileSink(dir / "fifo", 4, 10, in_place()); }).find(not_regular), std::string::npos);
  EXPECT_THROW(FileSink(dir / "out.bin", 0, 10), std::invalid_argument);
  EXPECT_THROW(FileSink(dir / "out.bin", 1 << 20, SIZE_MAX / 2), std::invalid_argument);  // past 2^64 bytes
  if (::geteuid() != 0) {  // root may write any file
    write_items(dir / "read-only.bin", pattern(4, 1));
    std::filesystem::permissions(dir / "read-only.bin", std::filesystem::perms(0444));
    EXPECT_NE(error_of([&] { FileSink(dir / "read-only.bin", 4, 10); }).find("cannot be written"), std::string::npos);
  }
}

TEST(FileSink, ReplacesTheFileASymbolicLinkNames) {
  ScratchDir dir;
  std::filesystem::create_directory(dir / "data");
  write_items(dir / "data" / "real.bin", pattern(50, 1));
  std::filesystem::create_symlink("data/real.bin", dir / "link.bin");
  const auto next = pattern(20, 2);
  FileSink sink(dir / "link.bin", 4, 20);
  sink.begin_run();
  put(sink, next, {0, 20});
  sink.commit();
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.bin"));
  EXPECT_EQ(difference(dir / "data" / "real.bin", as_bytes(next)), "");
  EXPECT_EQ(names_in(dir / "data"), std::vector<std::string>{"real.bin"});
}

TEST(FileSink, InPlaceWritesTheTargetAndCutsItAfterAFailedRun) {
  ScratchDir dir;
  const auto target = dir / "out.bin";
  {
    std::ofstream out(target, std::ios::binary);
    out << "hhhhhhhh" << std::string(4000, 'x');
  }
  FileOptions o = in_place();
  o.offset = 8;
  FileSink sink(target, 4, 100, o);
  const auto next = pattern(100, 2);
  sink.begin_run();
  EXPECT_EQ(std::filesystem::file_size(target), 4008u) << "the size changed before the run wrote";
  put(sink, next, {50, 100});
  put(sink, next, {0, 50});
  sink.commit();
  auto bytes = file_bytes(target);
  ASSERT_EQ(bytes.size(), 8u + 400u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), 8), "hhhhhhhh");
  EXPECT_EQ(std::memcmp(bytes.data() + 8, next.data(), 400), 0);
  // A failed run: nothing past the items that finished stays.
  sink.begin_run();
  put(sink, next, {0, 30});
  sink.abandon(30);
  EXPECT_EQ(std::filesystem::file_size(target), 8u + 30u * 4);
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.bin"});
}

TEST(FileSink, InPlaceRunRefusedBeforeItWroteLeavesTheTargetAlone) {
  ScratchDir dir;
  const auto target = dir / "out.bin";
  const auto old = pattern(1000, 1);
  write_items(target, old);
  FileSink sink(target, 4, 100, in_place());
  sink.begin_run();
  sink.abandon(0);
  EXPECT_EQ(difference(target, as_bytes(old)), "");
  FileSink fresh(dir / "new.bin", 4, 100, in_place());
  fresh.begin_run();
  fresh.abandon(0);
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.bin"}) << "the refused run left the file it created";
}

TEST(FileSink, DirectWritesSkipThePageCache) {
  ScratchDir dir;
  constexpr std::size_t items = 64 * 1024;  // 256 KiB in 64 KiB pieces
  // Where O_DIRECT is refused, or kept in memory anyway (tmpfs), there is nothing to see.
  {
    const auto probe = dir / "probe.bin";
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
    if (fd < 0) GTEST_SKIP() << "the temporary directory's file system refuses O_DIRECT: " << std::strerror(errno);
    void* page = std::aligned_alloc(4096, 4096);
    std::memset(page, 1, 4096);
    const bool wrote = ::pwrite(fd, page, 4096, 0) == 4096;
    std::free(page);
    ::close(fd);
    ASSERT_TRUE(wrote);
    if (cached_pages(probe) != 0) GTEST_SKIP() << "this file system keeps O_DIRECT writes in the page cache";
  }
  std::unique_ptr<std::uint32_t, decltype(&std::free)> slot(
      static_cast<std::uint32_t*>(std::aligned_alloc(4096, items * 4)), &std::free);
  const auto next = pattern(items, 3);
  std::memcpy(slot.get(), next.data(), items * 4);
  for (const bool direct : {true, false}) {
    const auto target = dir / (direct ? "direct.bin" : "cached.bin");
    FileOptions o;
    o.direct = direct;
    FileSink sink(target, 4, items, o);
    sink.begin_run();
    for (std::size_t at = 0; at < items; at += 16 * 1024)
      sink.write({at, at + 16 * 1024}, std::as_bytes(std::span(slot.get() + at, 16 * 1024)));
    sink.commit();
    // Looked at before the file is read back, which brings it into the cache.
    if (direct)
      EXPECT_EQ(cached_pages(target), 0u) << "the direct sink's aligned writes went through the page cache";
    else
      EXPECT_GT(cached_pages(target), 0u) << "the page cache check cannot tell cached writes here";
    EXPECT_EQ(difference(target, as_bytes(next)), "");
  }
}
