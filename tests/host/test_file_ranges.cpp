// Ranges of a file read into "device" memory through the lanes' staging
// slots, on the host executor: every byte lands where its range says at any
// chunk size, alignment and number of lanes, under jitter; bad input is
// refused before a byte is written; a read that fails stops every lane, names
// how far the run got, copies each chunk whole or not at all, and leaves
// nothing running. Host-only: this is how CI tests the checkpoint loader's engine.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "io/file_ranges.hpp"
#include "ring_test.hpp"
#include "scratch_dir.hpp"
#include "sluice/core/io_error.hpp"

namespace sluice::test {

namespace {

constexpr std::byte poison{0xA5};

std::byte file_byte(std::uint64_t at) { return static_cast<std::byte>((at * 131 + (at >> 12) * 7 + 3) & 0xff); }

std::filesystem::path write_file(const ScratchDir& dir, std::size_t bytes) {
  std::vector<char> data(bytes);
  for (std::size_t k = 0; k < bytes; ++k) data[k] = static_cast<char>(file_byte(k));
  const auto path = dir / "data.bin";
  std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(bytes));
  return path;
}

// Bytes of `to` that are not the file's bytes from `offset`.
std::size_t wrong(const std::vector<std::byte>& to, std::uint64_t offset) {
  std::size_t n = 0;
  for (std::size_t k = 0; k < to.size(); ++k) n += to[k] != file_byte(offset + k);
  return n;
}

// The host executors of a read's lanes, kept past the read to be checked.
struct Lanes {
  explicit Lanes(HostRingOptions o = {}) : options(o) {}
  HostRingOptions options;
  std::function<void(std::size_t lane, HostRingExecutor&)> setup = {};
  std::vector<std::shared_ptr<HostRingExecutor>> made;
  MakeExecutor make() {
    return [this](std::size_t lane) {
      auto e = std::make_shared<HostRingExecutor>(HostRingOptions{options.jitter_us, options.seed + lane});
      if (setup) setup(lane, *e);
      made.push_back(e);  // on the reading thread, before the lanes start
      return e;
    };
  }
  std::vector<std::string> violations() const {
    std::vector<std::string> all;
    for (const auto& e : made)
      for (auto& v : e->violations()) all.push_back(std::move(v));
    return all;
  }
};

struct Case {
  std::vector<std::uint64_t> offsets;
  std::vector<std::size_t> sizes;
};

}  // namespace

TEST(FileRanges, EveryByteLandsWhereItsRangeSaysAtAnyChunkAndAlignment) {
  ScratchDir dir;
  const std::size_t file_bytes = 3 * 65536 + 777;
  const auto path = write_file(dir, file_bytes);
  // A range from an unaligned offset to the file's unaligned end; one inside a
  // page; one of no bytes; one that starts on a page and ends mid-chunk.
  const Case c{{4100, 10, 0, 8192}, {file_bytes - 4100, 3000, 0, 70000}};
  for (std::size_t chunk : {4096u, 8192u, 65536u, 1u << 20}) {
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      Lanes lanes({.jitter_us = 200, .seed = seed});
      std::vector<std::vector<std::byte>> to;
      std::vector<FileRange> ranges;
      for (std::size_t r = 0; r < c.sizes.size(); ++r) to.emplace_back(c.sizes[r], poison);
      for (std::size_t r = 0; r < c.sizes.size(); ++r) ranges.push_back({c.offsets[r], c.sizes[r], to[r].data()});
      FileReadReport report;
      within(std::chrono::seconds(60), "a file read", [&] {
        report = read_file_ranges(path, ranges, lanes.make(), {.chunk_bytes = chunk, .staging = 2, .ahead = 2, .threads = 3});
      });
      for (std::size_t r = 0; r < c.sizes.size(); ++r)
        EXPECT_EQ(wrong(to[r], c.offsets[r]), 0u) << "range " << r << ", chunks of " << chunk << ", seed " << seed;
      std::size_t total = 0;
      for (std::size_t s : c.sizes) total += s;
      EXPECT_EQ(report.bytes, total);
      EXPECT_GE(report.chunks, (file_bytes - 4100 + chunk - 1) / chunk);
      EXPECT_EQ(lanes.made.size(), std::min<std::size_t>(3, report.chunks)) << "a lane a chunk, at most";
      // The lanes' reports add up to the read.
      std::size_t lane_chunks = 0;
      std::uint64_t lane_bytes = 0;
      for (const LaneReport& l : report.lanes) {
        lane_chunks += l.chunks, lane_bytes += l.bytes;
        // A lane that read began after the read's start and before its own end.
        if (l.chunks > 0) EXPECT_GE(l.started_seconds, l.ring_made_seconds);
        EXPECT_GT(l.ring_made_seconds, 0.0);
        EXPECT_LE(l.started_seconds, l.finished_seconds);
      }
      EXPECT_EQ(report.lanes.size(), lanes.made.size());
      EXPECT_EQ(lane_chunks, report.chunks);
      EXPECT_EQ(lane_bytes, report.bytes);
      const auto violations = lanes.violations();
      EXPECT_TRUE(violations.empty()) << violations.front();
    }
  }
}

// A checkpoint's tensors lie end to end: many small ranges share a chunk
// (one ring position, not one each), each still lands in its own memory.
TEST(FileRanges, RangesEndToEndShareChunksAndEachLandsInItsOwnMemory) {
  ScratchDir dir;
  const auto path = write_file(dir, 200000);
  std::vector<std::vector<std::byte>> to;
  std::vector<FileRange> ranges;
  std::uint64_t at = 24;
  for (std::size_t r = 0; r < 120; ++r) {
    const std::size_t bytes = 1 + (r * 97) % 1500;
    to.emplace_back(bytes, poison);
    ranges.push_back({at, bytes, nullptr});
    at += bytes + (r % 3 == 0 ? 100 : 0);  // a few small gaps, as alignment padding leaves
  }
  for (std::size_t r = 0; r < ranges.size(); ++r) ranges[r].to = to[r].data();
  Lanes lanes({.jitter_us = 50, .seed = 9});
  const FileReadReport report = read_file_ranges(path, ranges, lanes.make(), {.chunk_bytes = 65536, .staging = 2});
  EXPECT_EQ(report.chunks, (at + 65535) / 65536);
  for (std::size_t r = 0; r < ranges.size(); ++r) EXPECT_EQ(wrong(to[r], ranges[r].offset), 0u) << "range " << r;
}

// Chunks of 1 MiB on 3 lanes, from an unaligned offset to an unaligned end:
// O_DIRECT reads the aligned pieces where the file system takes it (tmpfs does not), the cache the rest.
TEST(FileRanges, DirectReadsWhereTheFileSystemTakesThemGiveTheSameBytes) {
  ScratchDir dir;
  const std::size_t file_bytes = (std::size_t{5} << 20) + 100;
  const auto path = write_file(dir, file_bytes);
  std::vector<std::byte> to(file_bytes - 4096 - 1, poison);
  const FileRange range{4097, to.size(), to.data()};
  // Whether the file system takes O_DIRECT, asked of it directly.
  const int probe = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  const bool takes_direct = probe >= 0;
  if (probe >= 0) ::close(probe);
  for (const bool direct : {true, false}) {
    std::fill(to.begin(), to.end(), poison);
    Lanes lanes({.jitter_us = 50, .seed = 4});
    const FileReadReport report =
        read_file_ranges(path, {&range, 1}, lanes.make(), {.chunk_bytes = std::size_t{1} << 20, .threads = 3, .direct = direct});
    EXPECT_EQ(report.direct, direct && takes_direct);
    EXPECT_EQ(report.chunks, 5u);  // from the page under 4097, 1 MiB each, past the end
    EXPECT_EQ(wrong(to, 4097), 0u) << (direct ? "O_DIRECT asked" : "cached");
  }
}

TEST(FileRanges, ReadsAloneForTheBoundCoverEveryChunk) {
  ScratchDir dir;
  const auto path = write_file(dir, 50000);
  std::vector<std::byte> buffer(8192, poison);
  const FileRange range{1000, 49000, buffer.data()};
  // From page 0 (the first chunk starts on the page under offset 1000) to the end.
  EXPECT_EQ(read_file_ranges_to_host(path, {&range, 1}, buffer, {.chunk_bytes = 8192}).bytes, 50000u);
  // A chunk of the buffer a lane: 4 lanes asked, 3 fit.
  std::vector<std::byte> three(3 * 8192, poison);
  EXPECT_EQ(read_file_ranges_to_host(path, {&range, 1}, three, {.chunk_bytes = 8192, .threads = 4}).bytes, 50000u);
  EXPECT_THROW(read_file_ranges_to_host(path, {&range, 1}, {buffer.data(), 4096}, {.chunk_bytes = 8192}), std::invalid_argument);
}

TEST(FileRanges, ReadsAloneIntoEachChunksPlaceLeaveTheFileInTheBuffer) {
  ScratchDir dir;
  const auto path = write_file(dir, 50000);
  std::vector<std::byte> buffer(7 * 8192, poison);
  const FileRange range{1000, 49000, buffer.data()};  // its `to` is not written: the reads go to the buffer
  const FileReadOptions options{.chunk_bytes = 8192, .threads = 3};
  // From page 0 (the page under offset 1000) to the end: 7 chunks.
  const FileReadReport report = read_file_ranges_to_host(path, {&range, 1}, buffer, options, ReadInto::chunk_place);
  EXPECT_EQ(report.chunks, 7u);
  EXPECT_EQ(report.bytes, 50000u);
  buffer.resize(50000);
  EXPECT_EQ(wrong(buffer, 0), 0u) << "each chunk at its own place: the buffer is the file";
  // One chunk short of every chunk's place is refused before any read.
  std::vector<std::byte> short_one(6 * 8192, poison);
  EXPECT_THROW(read_file_ranges_to_host(path, {&range, 1}, short_one, options, ReadInto::chunk_place), std::invalid_argument);
  EXPECT_EQ(std::count(short_one.begin(), short_one.end(), poison), static_cast<std::ptrdiff_t>(short_one.size()));
}

TEST(FileRanges, AFileJustWrittenIsInThePageCache) {
  ScratchDir dir;
  const auto path = write_file(dir, 5 * 4096 + 10);
  EXPECT_GT(cached_fraction(path, 0, 5 * 4096 + 10), 0.99);
  EXPECT_GT(cached_fraction(path, 4097, 100), 0.99);
  EXPECT_EQ(cached_fraction(path, 7, 0), 1.0);
  EXPECT_THROW(cached_fraction(path, 4096, 5 * 4096), IoError);
  EXPECT_THROW(cached_fraction(dir / "missing.bin", 0, 1), IoError);
}

// More pages than are sampled, half of them dropped from the cache: the
// sample sees half (where the file system drops pages when asked).
TEST(FileRanges, TheCachedShareOfALargeFileIsSampledEvenly) {
  ScratchDir dir;
  const std::size_t bytes = std::size_t{16} << 20;  // 4096 pages, four times the sample
  const auto path = write_file(dir, bytes);
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, bytes / 2, bytes / 2, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (cached_fraction(path, bytes / 2, bytes / 2) > 0.1) GTEST_SKIP() << "this file system keeps pages it is asked to drop";
  EXPECT_NEAR(cached_fraction(path, 0, bytes), 0.5, 0.02);
  EXPECT_GT(cached_fraction(path, 0, bytes / 2), 0.99);
}

TEST(FileRanges, BadInputIsRefusedBeforeAByteIsWritten) {
  ScratchDir dir;
  const auto path = write_file(dir, 10000);
  std::vector<std::byte> to(6000, poison);
  Lanes lanes;
  auto read = [&](FileRange range, FileReadOptions o = {}, std::filesystem::path p = {}) {
    read_file_ranges(p.empty() ? path : p, {&range, 1}, lanes.make(), o);
  };
  try {
    read({5000, 6000, to.data()});
    FAIL() << "a range past the end was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("runs past the file's end (10000 bytes)"), std::string::npos) << e.what();
    EXPECT_EQ(e.path(), path.string());
  }
  EXPECT_THROW(read({0, 10, nullptr}), std::invalid_argument);
  EXPECT_THROW(read({0, 10, to.data()}, {.chunk_bytes = 5000}), std::invalid_argument);
  EXPECT_THROW(read({0, 10, to.data()}, {.chunk_bytes = 0}), std::invalid_argument);
  EXPECT_THROW(read({0, 10, to.data()}, {.staging = 0}), std::invalid_argument);
  EXPECT_THROW(read({0, 10, to.data()}, {.staging = 4, .ahead = 2}), std::invalid_argument);  // 3 device slots
  EXPECT_THROW(read({0, 10, to.data()}, {.ahead = 0}), std::invalid_argument);
  EXPECT_THROW(read({0, 10, to.data()}, {}, dir / "missing.bin"), IoError);
  for (std::byte b : to) ASSERT_EQ(b, poison);
}

TEST(FileRanges, AFailedReadNamesHowFarTheRunGotAndLeavesNothingRunning) {
  ScratchDir dir;
  const auto path = write_file(dir, 10 * 4096);
  std::vector<std::byte> to(10 * 4096, poison);
  const FileRange range{0, to.size(), to.data()};
  Lanes lanes({.jitter_us = 100, .seed = 5});
  lanes.setup = [](std::size_t, HostRingExecutor& e) { e.inject({{4, Step::stage}}); };  // chunk 4's read fails
  within(std::chrono::seconds(30), "a file read that fails", [&] {
    try {
      read_file_ranges(path, {&range, 1}, lanes.make(), {.chunk_bytes = 4096, .staging = 2, .ahead = 2, .threads = 1});
      FAIL() << "the failed read was not reported";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("chunk 4 of 10 (file bytes 16384..20480); 4 other chunks (16384 bytes) were copied"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("injected"), std::string::npos) << e.what();
    }
  });
  // One lane: the chunks before the failure are in; none after it was read.
  std::vector<std::byte> first(to.begin(), to.begin() + 4 * 4096);
  EXPECT_EQ(wrong(first, 0), 0u);
  for (std::size_t k = 4 * 4096; k < to.size(); ++k) ASSERT_EQ(to[k], poison) << "byte " << k;
  ASSERT_EQ(lanes.made.size(), 1u);
  expect_nothing_held(*lanes.made[0]);
}

// A copy that fails on the copy lane shows at a later take: the error names
// its own chunk, not the one being read then.
TEST(FileRanges, ACopyThatFailsIsNamedAtItsOwnChunk) {
  ScratchDir dir;
  const auto path = write_file(dir, 10 * 4096);
  std::vector<std::byte> to(10 * 4096, poison);
  const FileRange range{0, to.size(), to.data()};
  Lanes lanes({.jitter_us = 100, .seed = 6});
  lanes.setup = [](std::size_t, HostRingExecutor& e) { e.inject({{4, Step::copy}}); };
  within(std::chrono::seconds(30), "a file read whose copy fails", [&] {
    try {
      read_file_ranges(path, {&range, 1}, lanes.make(), {.chunk_bytes = 4096, .staging = 2, .ahead = 2, .threads = 1});
      FAIL() << "the failed copy was not reported";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("chunk 4 of 10 (file bytes 16384..20480); 4 other chunks (16384 bytes) were copied"),
                std::string::npos)
          << e.what();
    }
  });
  std::vector<std::byte> first(to.begin(), to.begin() + 4 * 4096);
  EXPECT_EQ(wrong(first, 0), 0u);
  expect_nothing_held(*lanes.made[0]);
}

// On several lanes a failure stops them all: the chunk that failed is named,
// the others are on the device whole or not at all, as many as the error says.
TEST(FileRanges, AFailedReadOnOneLaneStopsEveryLaneAndEachChunkIsWholeOrUntouched) {
  ScratchDir dir;
  constexpr std::size_t chunks = 40, lane_count = 3;
  const auto path = write_file(dir, chunks * 4096);
  for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
    std::vector<std::byte> to(chunks * 4096, poison);
    const FileRange range{0, to.size(), to.data()};
    // Lane 1 runs at once and its second chunk fails (which chunk that is depends on how the
    // lanes ran); lanes 0 and 2 wait up to 2 ms at every operation and stop at the failure.
    std::vector<std::shared_ptr<HostRingExecutor>> made;
    const MakeExecutor make = [&](std::size_t lane) {
      auto e = std::make_shared<HostRingExecutor>(HostRingOptions{lane == 1 ? 0u : 2000u, seed * 10 + lane});
      if (lane == 1) e->inject({{1, Step::stage}});
      made.push_back(e);
      return e;
    };
    std::string what;
    within(std::chrono::seconds(30), "a file read that fails on one lane", [&] {
      try {
        read_file_ranges(path, {&range, 1}, make, {.chunk_bytes = 4096, .staging = 2, .ahead = 2, .threads = lane_count});
      } catch (const std::exception& e) {
        what = e.what();
      }
    });
    std::size_t failed = 0;
    ASSERT_EQ(std::sscanf(what.c_str() + std::min(what.size(), what.find("chunk ")), "chunk %zu of 40", &failed), 1) << what;
    ASSERT_NE(what.find(fmt::format("chunk {} of 40 (file bytes {}..{}); ", failed, failed * 4096, (failed + 1) * 4096)),
              std::string::npos)
        << what;
    std::size_t whole = 0;
    for (std::size_t c = 0; c < chunks; ++c) {
      const std::vector<std::byte> chunk(to.begin() + c * 4096, to.begin() + (c + 1) * 4096);
      const bool copied = wrong(chunk, c * 4096) == 0;
      const bool untouched = std::all_of(chunk.begin(), chunk.end(), [](std::byte b) { return b == poison; });
      EXPECT_TRUE(copied || untouched) << "chunk " << c << " is torn, seed " << seed;
      EXPECT_FALSE(c == failed && copied) << "the failed chunk was copied, seed " << seed;
      whole += copied;
    }
    EXPECT_NE(what.find(fmt::format("; {} other chunks ({} bytes) were copied", whole, whole * 4096)), std::string::npos)
        << what << " (whole chunks: " << whole << ")";
    EXPECT_LT(whole, chunks / 2) << "the other lanes read on past the failure";
    ASSERT_EQ(made.size(), lane_count);
    for (const auto& e : made) expect_nothing_held(*e);
  }
}

// The lanes take the next chunk no lane has taken: one slowed down (its
// thread descheduled, its reads slower) reads fewer, and no share dealt to it
// in advance ends the read late. Each lane's report says what it copied.
TEST(FileRanges, ASlowLaneTakesFewerChunksAndTheOthersReadTheRest) {
  ScratchDir dir;
  constexpr std::size_t chunks = 60;
  const auto path = write_file(dir, chunks * 4096);
  std::vector<std::byte> to(chunks * 4096, poison);
  const FileRange range{0, to.size(), to.data()};
  std::vector<std::shared_ptr<HostRingExecutor>> made;
  // Lane 0 sleeps 20 ms before each of its stages that has edges (from its third on), the others
  // do not; dealt in turn, each would read 20.
  const MakeExecutor make = [&](std::size_t lane) {
    auto e = std::make_shared<HostRingExecutor>(HostRingOptions{0, 11 + lane});
    if (lane == 0)
      e->ignore_edges([](const RingOp& op, const RingEdge&) {
        if (op.ref.step == Step::stage) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return true;
      });
    made.push_back(e);
    return e;
  };
  FileReadReport report;
  within(std::chrono::seconds(60), "a file read with a slow lane", [&] {
    report = read_file_ranges(path, {&range, 1}, make, {.chunk_bytes = 4096, .staging = 2, .ahead = 2, .threads = 3});
  });
  EXPECT_EQ(wrong(to, 0), 0u);
  ASSERT_EQ(report.lanes.size(), 3u);
  EXPECT_EQ(report.lanes[0].chunks + report.lanes[1].chunks + report.lanes[2].chunks, chunks);
  EXPECT_LT(report.lanes[0].chunks, chunks / 3) << "the slow lane was dealt a share (" << report.lanes[0].chunks << " chunks)";
  for (const auto& e : made) expect_nothing_held(*e);
}

TEST(FileRanges, AFileCutBeforeItsRangesIsAnIoErrorNamingTheOffset) {
  ScratchDir dir;
  const auto path = write_file(dir, 10 * 4096);
  std::vector<std::byte> to(10 * 4096, poison);
  const FileRange range{0, to.size(), to.data()};
  Lanes lanes;
  // Cut the file just before chunk 3 is read (the edge filter is asked about
  // each stage's edges before it runs, and keeps them all): its read finds the end.
  std::atomic<int> calls = 0;
  lanes.setup = [&](std::size_t, HostRingExecutor& e) {
    e.ignore_edges([&](const RingOp& op, const RingEdge&) {
      if (op.ref.step == Step::stage && op.ref.position == 3 && calls++ == 0) std::filesystem::resize_file(path, 3 * 4096 + 10);
      return true;
    });
  };
  try {
    read_file_ranges(path, {&range, 1}, lanes.make(), {.chunk_bytes = 4096, .staging = 2, .ahead = 2, .threads = 1});
    FAIL() << "a cut file was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("the file ends here"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("chunk 3 of 10"), std::string::npos) << e.what();
    EXPECT_EQ(e.offset(), 3u * 4096 + 10);
  }
}

}  // namespace sluice::test
