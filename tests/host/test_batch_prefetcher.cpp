// The prefetcher for batches of any shape, on the host executor: batches of
// pieces of any size and kind come out in order with their bytes, slots grow,
// page-locked pieces are copied where they lie, kept batches keep their
// bytes, and a producer that fails or a consumer that stops leaves nothing
// running. Host-only: this is how CI tests the engine the GPU runs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <span>
#include <thread>
#include <vector>

#include "memory_file.hpp"
#include "ring/batch_prefetcher.hpp"
#include "ring_test.hpp"
#include "sluice/core/ahead.hpp"

namespace sluice::test {

namespace {

// Batch b's piece k: its bytes say which batch and piece they are.
std::vector<std::byte> piece_bytes(std::size_t batch, std::size_t k, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  fill_item(batch * 7 + k, out);
  return out;
}

struct Source {
  std::vector<std::vector<std::vector<std::byte>>> batches;  // [batch][piece]
  // Sizes that grow and shrink, so that slots grow mid-run and serve smaller
  // batches after; or that only shrink, so that a slot's memory is never replaced.
  explicit Source(std::size_t count, bool shrinking = false) {
    for (std::size_t b = 0; b < count; ++b) {
      const std::size_t scale = shrinking ? count - b : 1 + (b * 5) % 11;
      const std::vector<std::size_t> sizes{scale * 300, 17, scale * 1000 + 3};
      batches.emplace_back();
      for (std::size_t k = 0; k < sizes.size(); ++k) batches.back().push_back(piece_bytes(b, k, sizes[k]));
    }
  }
  std::vector<HostPiece> pieces(std::size_t b, bool page_locked_middle = false) const {
    std::vector<HostPiece> out;
    for (std::size_t k = 0; k < batches[b].size(); ++k)
      out.push_back({batches[b][k].data(), batches[b][k].size(), page_locked_middle && k == 1});
    return out;
  }
};

// Bytes of a taken batch that are not its pieces'.
std::size_t wrong_in(const BatchPrefetcher::Batch& got, const Source& source) {
  const auto& pieces = source.batches.at(got.position);
  if (got.offsets.size() != pieces.size()) return SIZE_MAX;
  std::size_t wrong = 0;
  for (std::size_t k = 0; k < pieces.size(); ++k)
    wrong += wrong_bytes(got.data + got.offsets[k], pieces[k].size(), got.position * 7 + k);
  return wrong;
}

// Puts every batch of `source` on its own thread, then closes.
std::thread produce(BatchPrefetcher& p, const Source& source, bool page_locked_middle = false) {
  return std::thread([&p, &source, page_locked_middle] {
    try {
      for (std::size_t b = 0; b < source.batches.size(); ++b) {
        const auto pieces = source.pieces(b, page_locked_middle);
        p.put(pieces);
      }
      p.close();
    } catch (const std::logic_error&) {
      // stopped: the producer ends
    }
  });
}

}  // namespace

TEST(BatchLayout, PiecesLieAtAlignedOffsetsInOrder) {
  const std::byte x[1]{};
  const std::vector<HostPiece> pieces{{x, 10}, {x, 300}, {x, 0}, {x, 1}};
  const BatchLayout layout = lay_out(pieces, 256);
  EXPECT_EQ(layout.offsets, (std::vector<std::size_t>{0, 256, 768, 768}));
  EXPECT_EQ(layout.bytes, 769u);
  EXPECT_EQ(lay_out({}, 256).bytes, 1u);  // an empty batch still takes a position
}

class BatchPrefetcherJitter : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(BatchPrefetcherJitter, BatchesComeInOrderWithTheirBytesAsSlotsGrow) {
  HostRingExecutor executor({.jitter_us = 60, .seed = GetParam()});
  const Source source(24);
  std::atomic<std::size_t> wrong{0}, checked{0};
  std::vector<std::size_t> positions;
  {
    BatchPrefetcher p(executor, {.ahead = 2, .held = 2, .threads = 2});
    std::thread producer = produce(p, source, GetParam() % 2 == 0);
    while (auto b = p.next()) {
      positions.push_back(b->position);
      // Read on the consumer's lane, as kernels would, twice with a pause: a
      // slot refilled while its batch is held shows.
      executor.on_consumer([b = *b, &source, &wrong, &checked] {
        std::size_t bad = wrong_in(b, source);
        std::this_thread::sleep_for(std::chrono::microseconds(30));
        bad += wrong_in(b, source);
        wrong += bad;
        ++checked;
      });
    }
    producer.join();
  }
  EXPECT_EQ(positions, upto(24));
  EXPECT_EQ(checked.load(), 24u);
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
  expect_nothing_held(executor);
}
INSTANTIATE_TEST_SUITE_P(Seeds, BatchPrefetcherJitter, ::testing::Range<std::uint64_t>(1, 9));

TEST(BatchPrefetcher, PageLockedPiecesAreCopiedWhereTheyLieAndKeptUntilCopied) {
  HostRingExecutor executor({.jitter_us = 40, .seed = 5});
  const Source source(6);
  std::size_t wrong = 0;
  {
    BatchPrefetcher p(executor, {.ahead = 2, .held = 1});
    std::vector<std::size_t> put;
    std::thread producer([&] {
      for (std::size_t b = 0; b < 6; ++b) put.push_back(p.put(source.pieces(b, true)));
      p.close();
    });
    while (auto b = p.next()) {
      executor.on_consumer([b = *b, &source, &wrong] { wrong += wrong_in(b, source); });
    }
    producer.join();
    EXPECT_EQ(put, upto(6));
    for (std::size_t b = 0; b < 6; ++b) EXPECT_TRUE(p.copied(b)) << "batch " << b;
  }
  EXPECT_EQ(wrong, 0u);
  expect_nothing_held(executor);
}

// A piece that a file also holds (another process's shared memory) is read
// from the file, never through its pointer: here the pointer's bytes are
// wrong on purpose, and every batch must still carry the file's. Batch 1 is
// large enough for the staging threads, the others the producer copies itself.
TEST(BatchPrefetcher, APieceThatAFileHoldsIsReadFromTheFileNotThroughItsPointer) {
  HostRingExecutor executor({.jitter_us = 30, .seed = 3});
  const std::vector<std::size_t> sizes{1000, (std::size_t{1} << 20) + 3, 17, 5000};
  std::vector<std::vector<std::byte>> want, decoy;
  const MemoryFile file;
  std::vector<std::uint64_t> at;
  std::uint64_t end = 5;  // the first piece lies past the file's start
  for (std::size_t b = 0; b < sizes.size(); ++b) {
    want.push_back(piece_bytes(b, 0, sizes[b]));
    decoy.emplace_back(sizes[b], std::byte{0xEE});
    at.push_back(end);
    file.write(want.back(), end);
    end += sizes[b] + 11;
  }
  const std::vector<std::byte> small = piece_bytes(9, 1, 40);  // read through its pointer, beside the file's
  std::size_t wrong = 0, batches = 0;
  {
    BatchPrefetcher p(executor, {.ahead = 2, .held = 1});
    std::thread producer([&] {
      for (std::size_t b = 0; b < sizes.size(); ++b)
        p.put(std::vector<HostPiece>{{decoy[b].data(), sizes[b], false, file.fd, at[b]}, {small.data(), small.size()}});
      p.close();
    });
    while (auto b = p.next()) {
      ++batches;
      executor.on_consumer([b = *b, &want, &small, &wrong] {
        wrong += wrong_bytes(b.data + b.offsets[0], want[b.position].size(), b.position * 7);
        wrong += wrong_bytes(b.data + b.offsets[1], small.size(), 9 * 7 + 1);
      });
    }
    producer.join();
  }
  EXPECT_EQ(batches, sizes.size());
  EXPECT_EQ(wrong, 0u);
  expect_nothing_held(executor);
}

// A file that ends before the piece does fails that batch, saying which piece,
// where and why; the batch before it arrives whole (read from the file too:
// its pointer's bytes are wrong).
TEST(BatchPrefetcher, APieceWhoseFileEndsEarlyFailsItsBatchSayingWhere) {
  HostRingExecutor executor({.jitter_us = 30, .seed = 4});
  const std::vector<std::byte> bytes = piece_bytes(0, 0, 4096);
  const std::vector<std::byte> decoy(4096, std::byte{0xEE});
  const MemoryFile file;
  file.write(bytes, 0);
  std::size_t wrong = SIZE_MAX;
  {
    BatchPrefetcher p(executor, {.ahead = 2, .held = 1});
    std::thread producer([&] {
      try {
        p.put(std::vector<HostPiece>{{decoy.data(), 4096, false, file.fd, 0}});
        p.put(std::vector<HostPiece>{{bytes.data(), 17, false}, {bytes.data(), 4096, false, file.fd, 1000}});
      } catch (const std::exception&) {
        // the second batch failed: next() reports it
      }
    });
    if (const auto first = p.next())
      executor.on_consumer([b = *first, &wrong] { wrong = wrong_bytes(b.data + b.offsets[0], 4096, 0); });
    try {
      p.next();
      ADD_FAILURE() << "no error";
    } catch (const RingError& e) {
      EXPECT_EQ(e.position(), 1u);
      const std::string what = e.what();
      EXPECT_NE(what.find("reading piece 1 of a batch from its file"), std::string::npos) << what;
      EXPECT_NE(what.find("at byte 3096 of 4096: the file ended"), std::string::npos) << what;
    }
    producer.join();
  }
  EXPECT_EQ(wrong, 0u) << "the batch before the failing one";
  expect_nothing_held(executor);
}

namespace {
// The one batch a producer puts fails at next(), with what went wrong; nothing is left held.
void expect_the_batch_fails(const std::vector<HostPiece>& pieces, const std::vector<std::string>& said) {
  HostRingExecutor executor({.jitter_us = 30, .seed = 5});
  {
    BatchPrefetcher p(executor, {.ahead = 2, .held = 1, .threads = 4});
    std::thread producer([&] {
      try {
        p.put(pieces);
      } catch (const std::exception&) {
        // next() reports it
      }
    });
    try {
      p.next();
      ADD_FAILURE() << "no error";
    } catch (const RingError& e) {
      EXPECT_EQ(e.position(), 0u);
      const std::string what = e.what();
      for (const std::string& words : said) EXPECT_NE(what.find(words), std::string::npos) << what;
    }
    producer.join();
  }
  expect_nothing_held(executor);
}
}  // namespace

TEST(BatchPrefetcher, APieceWhoseFileCannotBeReadFailsItsBatchWithTheSystemsReason) {
  // pread of a directory fails with EISDIR: an error, not an early end.
  const int directory = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(directory, 0);
  const std::vector<std::byte> bytes = piece_bytes(0, 0, 4096);
  expect_the_batch_fails({{bytes.data(), 4096, false, directory, 0}},
                         {"reading piece 0 of a batch from its file", "at byte 0 of 4096", std::strerror(EISDIR)});
  ::close(directory);
}

TEST(BatchPrefetcher, ALargePieceWhoseFileEndsEarlyFailsItsBatchFromTheStagingThreads) {
  // 1 MiB, past the size staged on the producer's thread: the staging
  // threads read it in pieces, and the ones past the file's end fail.
  const std::size_t bytes = std::size_t{1} << 20;
  const std::vector<std::byte> all = piece_bytes(0, 0, bytes);
  const MemoryFile file;
  file.write(std::span(all).first(600'000), 0);
  expect_the_batch_fails({{all.data(), bytes, false, file.fd, 0}},
                         {"reading piece 0 of a batch from its file", "of 1048576: the file ended"});
}

// A batch the consumer keeps past its release keeps its bytes while its slot
// serves the batches after it; one it does not keep is overwritten, which is
// why keep() exists (and shows that this test can see it).
TEST(BatchPrefetcher, AKeptBatchKeepsItsBytesWhileItsSlotServesLaterBatches) {
  for (const bool keep : {true, false}) {
    SCOPED_TRACE(keep ? "kept" : "not kept");
    HostRingExecutor executor;
    const Source source(12, true);
    std::optional<BatchPrefetcher::Batch> first;
    {
      BatchPrefetcher p(executor, {.ahead = 1, .held = 1});
      std::thread producer = produce(p, source);
      while (auto b = p.next()) {
        if (b->position == 0) {
          first = *b;
          if (keep) p.keep(0);
        }
      }
      producer.join();
    }
    ASSERT_TRUE(first);
    const std::size_t wrong = wrong_in(*first, source);
    if (keep)
      EXPECT_EQ(wrong, 0u);
    else
      EXPECT_GT(wrong, 0u);
    expect_nothing_held(executor);
  }
}

TEST(BatchPrefetcher, AnEmptyBatchTakesAPosition) {
  HostRingExecutor executor;
  BatchPrefetcher p(executor, {});
  std::thread producer([&] {
    p.put({});
    p.close();
  });
  const auto b = p.next();
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->offsets.empty());
  EXPECT_FALSE(p.next());
  producer.join();
}

TEST(BatchPrefetcher, AProducerThatFailsFailsTheNextOfThatBatchWithItsReason) {
  HostRingExecutor executor({.jitter_us = 30, .seed = 2});
  const Source source(3);
  {
    BatchPrefetcher p(executor, {.ahead = 2, .held = 2});
    std::thread producer([&] {
      for (std::size_t b = 0; b < 3; ++b) p.put(source.pieces(b));
      p.fail("the dataset raised ValueError");
    });
    for (std::size_t b = 0; b < 3; ++b) {
      const auto got = p.next();
      ASSERT_TRUE(got);
      EXPECT_EQ(got->position, b);
    }
    try {
      p.next();
      ADD_FAILURE() << "no error";
    } catch (const RingError& e) {
      EXPECT_EQ(e.position(), 3u);
      EXPECT_NE(std::string(e.what()).find("the dataset raised ValueError"), std::string::npos) << e.what();
    }
    producer.join();
  }
  expect_nothing_held(executor);
}

TEST(BatchPrefetcher, APieceWithoutDataIsRefusedBeforeAnyWork) {
  HostRingExecutor executor;
  BatchPrefetcher p(executor, {});
  const std::vector<HostPiece> bad{{nullptr, 8}};
  EXPECT_THROW(p.put(bad), std::invalid_argument);
  p.close();
  EXPECT_FALSE(p.next());
}

TEST(BatchPrefetcher, StopWakesAProducerWaitingForTheConsumer) {
  HostRingExecutor executor;
  const Source source(10);
  std::atomic<bool> ended{false};
  std::atomic<std::size_t> put{0};
  {
    BatchPrefetcher p(executor, {.ahead = 2, .held = 1});
    std::thread producer([&] {
      try {
        for (std::size_t b = 0; b < 10; ++b) {
          p.put(source.pieces(b));
          ++put;
        }
      } catch (const std::logic_error&) {
        ended = true;
      }
    });
    // Nobody takes: the producer puts `ahead` batches and waits.
    while (put.load() < 2) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(put.load(), 2u);
    p.stop();
    producer.join();
    EXPECT_TRUE(ended.load());
  }
  expect_nothing_held(executor);
}

TEST(BatchPrefetcher, AConsumerThatStopsAfterAnyBatchLeavesNothingRunning) {
  for (std::size_t after : {0u, 1u, 3u, 7u}) {
    SCOPED_TRACE("after " + std::to_string(after));
    HostRingExecutor executor({.jitter_us = 40, .seed = after});
    const Source source(10);
    {
      BatchPrefetcher p(executor, {.ahead = 3, .held = 2});
      std::thread producer = produce(p, source);
      for (std::size_t n = 0; n < after; ++n) ASSERT_TRUE(p.next());
      p.stop();
      producer.join();
      EXPECT_THROW(p.next(), std::logic_error);
    }
    EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
    expect_nothing_held(executor);
  }
}

TEST(BatchPrefetcher, ReadyWithinWakesWhenABatchComesAndAtTheEnd) {
  HostRingExecutor executor;
  const Source source(1);
  BatchPrefetcher p(executor, {});
  EXPECT_FALSE(p.ready_within(std::chrono::milliseconds(5)));
  p.put(source.pieces(0));
  EXPECT_TRUE(p.ready_within(std::chrono::milliseconds(0)));
  ASSERT_TRUE(p.next());
  EXPECT_FALSE(p.ready_within(std::chrono::milliseconds(5)));
  p.close();
  EXPECT_TRUE(p.ready_within(std::chrono::milliseconds(0)));
  EXPECT_FALSE(p.next());
}

TEST(BatchPrefetcher, BadOptionsAreRefused) {
  HostRingExecutor executor;
  EXPECT_THROW(BatchPrefetcher(executor, {.ahead = 0}), std::invalid_argument);
  EXPECT_THROW(BatchPrefetcher(executor, {.ahead = most_ahead + 1}), std::invalid_argument);
  EXPECT_THROW(BatchPrefetcher(executor, {.held = 0}), std::invalid_argument);
  EXPECT_THROW(BatchPrefetcher(executor, {.align = 24}), std::invalid_argument);
}

}  // namespace sluice::test
