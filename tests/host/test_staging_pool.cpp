#include "core/staging_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/streaming_copy.hpp"

using sluice::StagingPool;

namespace {
std::vector<char> pattern(std::size_t n) {
  std::vector<char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131) % 251);
  return v;
}
}  // namespace

TEST(StagingPool, CopiesEveryByteForAwkwardSizes) {
  StagingPool pool(4);
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, StagingPool::default_piece_bytes - 1,
                            StagingPool::default_piece_bytes * 4 + 3, std::size_t{5} * 1024 * 1024 + 17}) {
    const auto src = pattern(bytes);
    std::vector<char> dst(bytes, 0);
    pool.copy(dst.data(), src.data(), bytes);
    EXPECT_EQ(dst, src) << bytes << " bytes";
  }
}

TEST(StagingPool, PiecesTileTheJobExactlyOnce) {
  StagingPool pool(3);
  for (std::size_t bytes : {1u, 99u, 100u, 101u, 1000u}) {
    std::mutex m;
    std::vector<std::pair<std::size_t, std::size_t>> seen;
    pool.run(bytes, 10, [&](std::size_t offset, std::size_t length) {
      std::lock_guard lock(m);
      seen.emplace_back(offset, length);
    });
    std::sort(seen.begin(), seen.end());
    std::size_t next = 0;
    for (const auto& [offset, length] : seen) {
      EXPECT_EQ(offset, next);
      EXPECT_GT(length, 0u);
      EXPECT_LE(length, 10u);
      next = offset + length;
    }
    EXPECT_EQ(next, bytes);
  }
}

TEST(StagingPool, TwoJobsShareTheThreadsInProportionToTheirBytes) {
  // Submitted together, a job of twice the bytes gets twice the pieces: the
  // queue hands out pieces, not a fixed split of threads per job.
  StagingPool pool(4);
  std::atomic<int> big{0}, small{0};
  auto slow = [](std::atomic<int>& count) {
    return [&count](std::size_t, std::size_t) {
      ++count;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    };
  };
  auto a = pool.submit(200, 1, slow(big));
  auto b = pool.submit(100, 1, slow(small));
  a->wait();
  b->wait();
  EXPECT_EQ(big, 200);
  EXPECT_EQ(small, 100);
}

TEST(StagingPool, EveryThreadTakesPart) {
  StagingPool pool(4);
  std::mutex m;
  std::set<std::thread::id> ids;
  pool.run(400, 1, [&](std::size_t, std::size_t) {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    std::lock_guard lock(m);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_FALSE(ids.contains(std::this_thread::get_id()));
}

TEST(StagingPool, AFailingPieceFailsItsJobAndSkipsTheRest) {
  StagingPool pool(2);
  std::atomic<int> ran{0};
  auto job = pool.submit(1000, 1, [&](std::size_t offset, std::size_t) {
    ++ran;
    if (offset == 3) throw std::runtime_error("piece 3 failed");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  });
  try {
    job->wait();
    ADD_FAILURE() << "the failed piece went unreported";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "piece 3 failed");
  }
  EXPECT_TRUE(job->done());
  EXPECT_LT(ran.load(), 1000);
  // The pool is unharmed.
  std::atomic<int> later{0};
  pool.run(10, 1, [&](std::size_t, std::size_t) { ++later; });
  EXPECT_EQ(later, 10);
}

TEST(StagingPool, ZeroBytesIsDoneAtOnceAndZeroPieceSizeIsRefused) {
  StagingPool pool(1);
  auto job = pool.submit(0, 1, [](std::size_t, std::size_t) { FAIL(); });
  EXPECT_TRUE(job->done());
  job->wait();
  EXPECT_THROW(pool.submit(10, 0, [](std::size_t, std::size_t) {}), std::invalid_argument);
}

TEST(StagingPool, DestructionRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    StagingPool pool(2);
    pool.submit(50, 1, [&](std::size_t, std::size_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ++ran;
    });
  }
  EXPECT_EQ(ran, 50);
}

TEST(StagingPool, PiecesSpreadAChunkOverEveryThread) {
  sluice::StagingPool pool(14);
  constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
  // 2 MiB over 14 threads: 146.3 KiB each, rounded up to whole pages.
  EXPECT_EQ(pool.piece_bytes_for(2 * MiB), 148 * KiB);
  EXPECT_GE(pool.piece_bytes_for(2 * MiB) * 14, 2 * MiB);
  EXPECT_EQ(pool.piece_bytes_for(64 * MiB), sluice::StagingPool::default_piece_bytes);  // large jobs: 1 MiB pieces
  EXPECT_EQ(pool.piece_bytes_for(100 * KiB), sluice::StagingPool::min_piece_bytes);     // tiny jobs: not below 64 KiB
  EXPECT_EQ(pool.piece_bytes_for(0), sluice::StagingPool::min_piece_bytes);
  sluice::StagingPool one(1);
  EXPECT_EQ(one.piece_bytes_for(8 * MiB), sluice::StagingPool::default_piece_bytes);
}

TEST(StagingPool, BalancedPiecesAreAboutFourAThreadInWholePages) {
  sluice::StagingPool pool(14);
  constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
  // 32 MiB over 56 quarters: 585.1 KiB each, rounded up to whole pages; 56 pieces.
  EXPECT_EQ(pool.balanced_piece_bytes(32 * MiB), 588 * KiB);
  EXPECT_EQ((32 * MiB + 588 * KiB - 1) / (588 * KiB), 56u);
  EXPECT_EQ(pool.balanced_piece_bytes(1 * MiB), 256 * KiB);  // small jobs: not below 256 KiB
  EXPECT_EQ(pool.balanced_piece_bytes(0), 256 * KiB);
  sluice::StagingPool one(1);
  EXPECT_EQ(one.balanced_piece_bytes(8 * MiB), 2 * MiB);
  EXPECT_EQ(one.balanced_piece_bytes(8 * MiB + 1) % 4096, 0u);
}

TEST(StagingPool, ThreadCount) {
  EXPECT_EQ(StagingPool(1).thread_count(), 1u);
  EXPECT_EQ(StagingPool(5).thread_count(), 5u);
  EXPECT_EQ(StagingPool().thread_count(), StagingPool::default_thread_count());
  EXPECT_GE(StagingPool::default_thread_count(), 1u);
}

TEST(StreamingCopy, EveryAlignmentAndSize) {
  const auto src = pattern(3 * 4096 + 200);
  for (std::size_t dst_shift : {0u, 1u, 7u, 15u, 16u})
    for (std::size_t src_shift : {0u, 3u, 16u})
      for (std::size_t bytes : {0u, 1u, 63u, 4095u, 4096u, 4097u, 3u * 4096u + 100u}) {
        std::vector<char> dst(bytes + dst_shift + 64, 0x7f);
        sluice::detail::copy_streaming(dst.data() + dst_shift, src.data() + src_shift, bytes);
        ASSERT_EQ(std::memcmp(dst.data() + dst_shift, src.data() + src_shift, bytes), 0)
            << bytes << " bytes, shifts " << dst_shift << "/" << src_shift;
        for (std::size_t i = 0; i < dst_shift; ++i) ASSERT_EQ(dst[i], 0x7f) << "wrote before the destination";
        for (std::size_t i = dst_shift + bytes; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0x7f) << "wrote past the end";
      }
}
