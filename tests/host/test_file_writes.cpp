// Device byte ranges written into a file through a ring to the host
// (io/file_writes.hpp), on the host executor: how the ranges are cut into
// chunks and runs; every byte lands at its file offset at any chunk size,
// number of staging slots and writer threads, in memory and in a real file
// through the durable FileSink; a write or a copy that fails names its chunk,
// keeps the write's own exception as the cause and says how far the run got;
// bad options are refused before any work.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/file_writes.hpp"
#include "scratch_dir.hpp"
#include "sluice/core/ahead.hpp"
#include "sluice/pipeline/file_io.hpp"
#include "to_host_test.hpp"

namespace sluice::test {

namespace {

std::byte file_byte(std::uint64_t at) { return static_cast<std::byte>((at * 131 + (at >> 9) * 7 + 3) & 0xff); }

// A file of `bytes` bytes cut into ranges of the given sizes, each in "device"
// memory of its own that holds the file's bytes at its offset; the ranges are
// handed over shuffled, so that few follow each other in the file.
struct Ranges {
  std::vector<std::vector<std::byte>> memory;
  std::vector<DeviceRange> ranges;
  std::uint64_t bytes = 0;

  Ranges(const std::vector<std::size_t>& sizes, std::uint64_t seed) {
    memory.reserve(sizes.size());
    for (std::size_t n : sizes) {
      memory.emplace_back(n);
      for (std::size_t k = 0; k < n; ++k) memory.back()[k] = file_byte(bytes + k);
      ranges.push_back({memory.back().data(), n, bytes});
      bytes += n;
    }
    std::mt19937_64 random(seed);
    std::shuffle(ranges.begin(), ranges.end(), random);
  }
  std::size_t wrong(const std::vector<std::byte>& file) const {
    std::size_t n = file.size() == bytes ? 0 : 1;
    for (std::size_t k = 0; k < std::min<std::size_t>(file.size(), bytes); ++k) n += file[k] != file_byte(k);
    return n;
  }
};

// An in-memory file: writes land at their offsets, from any thread.
struct MemoryFile {
  std::mutex mutex;
  std::vector<std::byte> bytes;
  std::size_t calls = 0;
  explicit MemoryFile(std::uint64_t size) : bytes(size, std::byte{0}) {}
  WriteAt writer() {
    return [this](std::uint64_t offset, std::span<const std::byte> data) {
      std::lock_guard lock(mutex);
      if (offset + data.size() > bytes.size()) throw std::out_of_range("a write past the file's end");
      std::memcpy(bytes.data() + offset, data.data(), data.size());
      ++calls;
    };
  }
};

std::vector<std::size_t> mixed_sizes(std::uint64_t seed, std::size_t count) {
  std::mt19937_64 random(seed);
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0; i < count; ++i) sizes.push_back(random() % 5 == 0 ? 0 : 1 + random() % 3000);
  return sizes;
}

struct WriteFault : std::runtime_error {
  explicit WriteFault(std::uint64_t at) : std::runtime_error("the write at " + std::to_string(at) + " failed"), offset(at) {}
  std::uint64_t offset;
};

std::vector<std::byte> read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

}  // namespace

// ---- Chunks and runs

TEST(FileWrites, ARangeIsCutAtChunkBytes) {
  std::vector<std::byte> memory(10);
  const DeviceRange r{memory.data(), 10, 1000};
  const auto chunks = write_chunks(std::span(&r, 1), 4);
  ASSERT_EQ(chunks.size(), 3u);
  const std::size_t sizes[] = {4, 4, 2};
  for (std::size_t c = 0; c < 3; ++c) {
    SCOPED_TRACE("chunk " + std::to_string(c));
    EXPECT_EQ(chunks[c].bytes, sizes[c]);
    ASSERT_EQ(chunks[c].pieces.size(), 1u);
    EXPECT_EQ(chunks[c].pieces[0].from, memory.data() + 4 * c);
    EXPECT_EQ(chunks[c].pieces[0].offset, 0u);
    EXPECT_EQ(chunks[c].pieces[0].bytes, sizes[c]);
    EXPECT_EQ(chunks[c].pieces[0].to, nullptr);
    ASSERT_EQ(chunks[c].runs.size(), 1u);
    EXPECT_EQ(chunks[c].runs[0].at, 0u);
    EXPECT_EQ(chunks[c].runs[0].bytes, sizes[c]);
    EXPECT_EQ(chunks[c].runs[0].offset, 1000u + 4 * c);
  }
}

TEST(FileWrites, RangesThatFollowEachOtherInTheFileShareARun) {
  std::vector<std::byte> a(3), b(5), c(2);
  const std::vector<DeviceRange> ranges{{a.data(), 3, 0}, {b.data(), 5, 3}, {c.data(), 2, 100}};
  const auto chunks = write_chunks(ranges, 64);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].bytes, 10u);
  ASSERT_EQ(chunks[0].pieces.size(), 3u);  // one piece per range: they lie in different memory
  EXPECT_EQ(chunks[0].pieces[1].from, b.data());
  EXPECT_EQ(chunks[0].pieces[1].offset, 3u);
  EXPECT_EQ(chunks[0].pieces[2].offset, 8u);
  ASSERT_EQ(chunks[0].runs.size(), 2u);
  EXPECT_EQ(chunks[0].runs[0].at, 0u);
  EXPECT_EQ(chunks[0].runs[0].bytes, 8u);
  EXPECT_EQ(chunks[0].runs[0].offset, 0u);
  EXPECT_EQ(chunks[0].runs[1].at, 8u);
  EXPECT_EQ(chunks[0].runs[1].bytes, 2u);
  EXPECT_EQ(chunks[0].runs[1].offset, 100u);
  // Given the other way round, the second does not follow the first in the file.
  const std::vector<DeviceRange> backwards{{b.data(), 5, 3}, {a.data(), 3, 0}};
  EXPECT_EQ(write_chunks(backwards, 64)[0].runs.size(), 2u);
}

TEST(FileWrites, ARunIsSplitWhereAChunkEnds) {
  std::vector<std::byte> a(6), b(6);
  const std::vector<DeviceRange> ranges{{a.data(), 6, 40}, {b.data(), 6, 46}};  // one run of 12 bytes in the file
  const auto chunks = write_chunks(ranges, 8);
  ASSERT_EQ(chunks.size(), 2u);
  ASSERT_EQ(chunks[0].runs.size(), 1u);
  EXPECT_EQ(chunks[0].runs[0].bytes, 8u);
  EXPECT_EQ(chunks[0].runs[0].offset, 40u);
  ASSERT_EQ(chunks[0].pieces.size(), 2u);
  EXPECT_EQ(chunks[0].pieces[1].from, b.data());
  EXPECT_EQ(chunks[0].pieces[1].bytes, 2u);
  ASSERT_EQ(chunks[1].runs.size(), 1u);
  EXPECT_EQ(chunks[1].runs[0].at, 0u);
  EXPECT_EQ(chunks[1].runs[0].bytes, 4u);
  EXPECT_EQ(chunks[1].runs[0].offset, 48u);
  ASSERT_EQ(chunks[1].pieces.size(), 1u);
  EXPECT_EQ(chunks[1].pieces[0].from, b.data() + 2);
}

TEST(FileWrites, EmptyRangesMakeNoChunksAndFullChunksNoEmptyOne) {
  EXPECT_TRUE(write_chunks({}, 8).empty());
  const std::vector<DeviceRange> empty{{nullptr, 0, 5}, {nullptr, 0, 0}};
  EXPECT_TRUE(write_chunks(empty, 8).empty());
  std::vector<std::byte> a(16);
  const std::vector<DeviceRange> exact{{nullptr, 0, 3}, {a.data(), 16, 0}, {nullptr, 0, 99}};
  const auto chunks = write_chunks(exact, 8);
  ASSERT_EQ(chunks.size(), 2u);
  for (const auto& c : chunks) {
    EXPECT_EQ(c.bytes, 8u);
    EXPECT_EQ(c.pieces.size(), 1u);
    EXPECT_EQ(c.runs.size(), 1u);
  }
}

TEST(FileWrites, ChunksCoverEveryByteOnce) {
  const Ranges r(mixed_sizes(7, 40), 7);
  for (std::size_t chunk : {1u, 5u, 64u, 1000u, 1u << 20}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const auto chunks = write_chunks(r.ranges, chunk);
    std::vector<int> seen(r.bytes, 0);
    for (const auto& c : chunks) {
      EXPECT_LE(c.bytes, chunk);
      EXPECT_GT(c.bytes, 0u);
      EXPECT_EQ(std::accumulate(c.pieces.begin(), c.pieces.end(), std::size_t{0},
                                [](std::size_t s, const CopyPiece& p) { return s + p.bytes; }),
                c.bytes);
      std::size_t at = 0;
      for (const auto& run : c.runs) {
        EXPECT_EQ(run.at, at);  // runs tile the chunk in order
        at += run.bytes;
        for (std::size_t k = 0; k < run.bytes; ++k) ++seen[run.offset + k];
      }
      EXPECT_EQ(at, c.bytes);
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  }
}

// ---- Writing

TEST(FileWrites, EveryByteLandsAtItsOffsetInMemory) {
  for (std::size_t chunk : {61u, 512u, 4096u, 1u << 20})
    for (std::size_t staging : {1u, 2u, 3u})
      for (unsigned threads : {1u, 3u}) {
        const std::uint64_t seed = chunk + staging * 10 + threads;
        SCOPED_TRACE("chunk " + std::to_string(chunk) + " staging " + std::to_string(staging) + " threads " +
                     std::to_string(threads));
        const Ranges r(mixed_sizes(seed, 24), seed);
        MemoryFile file(r.bytes);
        HostRingExecutor executor({.jitter_us = chunk < 100 ? 0u : 40u, .seed = seed});
        std::atomic<std::uint64_t> written{0};
        write_device_ranges(r.ranges, executor, {}, file.writer(), {chunk, staging, threads}, written);
        EXPECT_EQ(r.wrong(file.bytes), 0u);
        EXPECT_EQ(written.load(), r.bytes);
        EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
        EXPECT_GT(executor.operations_checked(), 0u);
        expect_nothing_held(executor);
      }
}

TEST(FileWrites, EveryByteLandsInARealFileThroughAFileSink) {
  ScratchDir dir;
  const auto path = dir / "checkpoint.bin";
  const Ranges r(mixed_sizes(11, 60), 11);
  FileSink sink(path, 1, r.bytes);  // one item is one byte: a piece's offset is the file's own
  sink.begin_run();
  const WriteAt write = [&sink](std::uint64_t offset, std::span<const std::byte> bytes) {
    if (bytes.empty()) return;
    const auto at = static_cast<std::size_t>(offset);
    sink.write({at, at + bytes.size()}, bytes);
  };
  HostRingExecutor executor({.jitter_us = 30});
  std::atomic<std::uint64_t> written{0};
  write_device_ranges(r.ranges, executor, {}, write, {4000, 3, 4}, written);
  sink.commit();
  EXPECT_EQ(written.load(), r.bytes);
  EXPECT_EQ(r.wrong(read_all(path)), 0u);
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
  expect_nothing_held(executor);
}

TEST(FileWrites, NoBytesToWriteTouchNothing) {
  HostRingExecutor executor;
  std::atomic<std::uint64_t> written{0};
  std::size_t calls = 0;
  const WriteAt write = [&](std::uint64_t, std::span<const std::byte>) { ++calls; };
  write_device_ranges({}, executor, {}, write, {}, written);
  const std::vector<DeviceRange> empty{{nullptr, 0, 0}, {nullptr, 0, 77}};
  write_device_ranges(empty, executor, {}, write, {}, written);
  EXPECT_EQ(calls, 0u);
  EXPECT_EQ(written.load(), 0u);
  EXPECT_EQ(executor.operations_checked(), 0u);
  expect_nothing_held(executor);
}

TEST(FileWrites, AWriteThatThrowsIsTheCauseAndWrittenSaysHowFar) {
  for (std::uint64_t fail_at : {0u, 1000u, 9999u}) {
    SCOPED_TRACE("fail at " + std::to_string(fail_at));
    std::vector<std::byte> memory(10000);
    for (std::size_t k = 0; k < memory.size(); ++k) memory[k] = file_byte(k);
    const std::vector<DeviceRange> ranges{{memory.data(), memory.size(), 0}};
    MemoryFile file(memory.size());
    const WriteAt inner = file.writer();
    const WriteAt write = [&](std::uint64_t offset, std::span<const std::byte> bytes) {
      if (offset <= fail_at && fail_at < offset + bytes.size()) throw WriteFault(fail_at);
      inner(offset, bytes);
    };
    HostRingExecutor executor({.jitter_us = 40});
    std::atomic<std::uint64_t> written{0};
    const std::size_t chunk = 1000;  // one write per chunk: each chunk is one piece of the writers'
    try {
      write_device_ranges(ranges, executor, {}, write, {chunk, 2, 2}, written);
      ADD_FAILURE() << "the run did not fail";
    } catch (const RingError& e) {
      const std::size_t k = fail_at / chunk;
      EXPECT_EQ(e.position(), k);
      EXPECT_EQ(e.step(), Step::drain);
      EXPECT_NE(std::string(e.what()).find("the write at " + std::to_string(fail_at) + " failed"), std::string::npos)
          << e.what();
      ASSERT_TRUE(e.cause());
      try {
        std::rethrow_exception(e.cause());
      } catch (const WriteFault& f) {
        EXPECT_EQ(f.offset, fail_at);
      } catch (...) {
        ADD_FAILURE() << "the cause is not the write's own exception";
      }
      EXPECT_EQ(written.load(), k * chunk);  // every chunk before it, none after
      EXPECT_LT(written.load(), memory.size());
      EXPECT_TRUE(std::equal(memory.begin(), memory.begin() + static_cast<std::ptrdiff_t>(k * chunk), file.bytes.begin()));
    }
    EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
    expect_nothing_held(executor);
  }
}

TEST(FileWrites, ACopyThatFailsNamesItsChunk) {
  const Ranges r(std::vector<std::size_t>(8, 500), 3);
  MemoryFile file(r.bytes);
  HostRingExecutor executor({.jitter_us = 40});
  executor.inject({{3, Step::copy}});
  std::atomic<std::uint64_t> written{0};
  try {
    write_device_ranges(r.ranges, executor, {}, file.writer(), {1000, 2, 2}, written);
    ADD_FAILURE() << "the run did not fail";
  } catch (const RingError& e) {
    EXPECT_EQ(e.position(), 3u);
    EXPECT_EQ(e.step(), Step::copy);
    EXPECT_NE(std::string(e.what()).find("injected"), std::string::npos) << e.what();
  }
  EXPECT_EQ(written.load(), 3000u);  // chunks 0 to 2
  expect_nothing_held(executor);
}

TEST(FileWrites, BadOptionsAndRangesAreRefusedBeforeAnyWork) {
  std::vector<std::byte> memory(64);
  const std::vector<DeviceRange> ranges{{memory.data(), 64, 0}};
  HostRingExecutor executor;
  std::atomic<std::uint64_t> written{0};
  std::size_t calls = 0;
  const WriteAt write = [&](std::uint64_t, std::span<const std::byte>) { ++calls; };
  auto refusal = [&](std::span<const DeviceRange> rs, FileWriteOptions o) -> std::string {
    try {
      write_device_ranges(rs, executor, {}, write, o, written);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_NE(refusal(ranges, {0, 3, 4}).find("chunk_bytes must be at least 1"), std::string::npos);
  EXPECT_NE(refusal(ranges, {16, 0, 4}).find("at least one staging slot"), std::string::npos);
  EXPECT_NE(refusal(ranges, {16, 3, 0}).find("at least one thread"), std::string::npos);
  const std::vector<DeviceRange> no_memory{{memory.data(), 64, 0}, {nullptr, 8, 64}};
  EXPECT_NE(refusal(no_memory, {}).find("a range with no memory"), std::string::npos);
  const std::vector<DeviceRange> too_far{{memory.data(), 64, UINT64_MAX - 10}};
  EXPECT_NE(refusal(too_far, {}).find("ends past 2^64"), std::string::npos);
  // More staging slots than a ring may run ahead, where there are chunks enough to use them.
  EXPECT_NE(refusal(ranges, {1, most_ahead + 1, 1}).find("ahead must be at most"), std::string::npos);
  EXPECT_EQ(calls, 0u);
  EXPECT_EQ(written.load(), 0u);
  EXPECT_EQ(executor.operations_checked(), 0u);
  expect_nothing_held(executor);
  // More staging slots than chunks are not: the ring has as many as there are chunks.
  EXPECT_EQ(refusal(ranges, {16, most_ahead + 1, 1}), "accepted");
  EXPECT_EQ(written.load(), 64u);
}

}  // namespace sluice::test
