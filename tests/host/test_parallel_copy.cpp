#include "sluice/parallel_copy.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

using sluice::ParallelCopier;

namespace {
std::vector<std::uint8_t> pattern(std::size_t bytes) {
  std::vector<std::uint8_t> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::uint8_t>((i * 131 + 7) ^ (i >> 11));
  return v;
}
}  // namespace

TEST(ParallelCopier, CopiesEveryByteForAwkwardSizes) {
  ParallelCopier copier(4);
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, ParallelCopier::min_piece_bytes - 1,
                            ParallelCopier::min_piece_bytes * 4 + 3, std::size_t{5} * 1024 * 1024 + 17}) {
    auto src = pattern(bytes);
    std::vector<std::uint8_t> dst(bytes + 1, 0xEE);  // one guard byte past the end
    copier.copy(dst.data(), src.data(), bytes);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << bytes << " bytes";
    EXPECT_EQ(dst[bytes], 0xEE) << "wrote past the end for " << bytes << " bytes";
  }
}

TEST(ParallelCopier, ReusableAcrossManyCopies) {
  ParallelCopier copier(3);
  const std::size_t bytes = 3 * 1024 * 1024;
  auto src = pattern(bytes);
  std::vector<std::uint8_t> dst(bytes);
  for (int round = 0; round < 50; ++round) {
    src[static_cast<std::size_t>(round) * 1000] = static_cast<std::uint8_t>(round);
    copier.copy(dst.data(), src.data(), bytes);
    ASSERT_EQ(src, dst) << "round " << round;
  }
}

TEST(ParallelCopier, EveryAlignmentOfSourceAndDestination) {
  // Pieces split at page boundaries of the copy, not of the buffers: any
  // alignment of either side must come through intact.
  ParallelCopier copier(3);
  const std::size_t bytes = 3 * ParallelCopier::min_piece_bytes + 77;
  auto src = pattern(bytes + 32);
  for (std::size_t src_offset : {0u, 1u, 7u, 15u}) {
    for (std::size_t dst_offset : {0u, 3u, 8u, 13u}) {
      std::vector<std::uint8_t> dst(bytes + 64, 0xEE);
      copier.copy(dst.data() + dst_offset, src.data() + src_offset, bytes);
      ASSERT_TRUE(std::equal(src.begin() + src_offset, src.begin() + src_offset + bytes, dst.begin() + dst_offset))
          << "src+" << src_offset << " dst+" << dst_offset;
      ASSERT_EQ(dst[dst_offset + bytes], 0xEE) << "wrote past the end";
      if (dst_offset > 0) {
        ASSERT_EQ(dst[dst_offset - 1], 0xEE) << "wrote before the start";
      }
    }
  }
}

TEST(ParallelCopier, ThreadCountIncludesTheCaller) {
  EXPECT_EQ(ParallelCopier(1).thread_count(), 1u);
  EXPECT_EQ(ParallelCopier(5).thread_count(), 5u);
  EXPECT_GE(ParallelCopier().thread_count(), 1u);
}

TEST(ParallelCopier, PiecesTileTheBuffer) {
  const std::size_t bytes = 1'000'003;
  auto src = pattern(bytes);
  for (unsigned pieces : {1u, 2u, 3u, 7u, 16u}) {
    std::vector<std::uint8_t> dst(bytes, 0);
    for (unsigned p = 0; p < pieces; ++p) sluice::copy_piece(reinterpret_cast<char*>(dst.data()),
                                                             reinterpret_cast<const char*>(src.data()), bytes, p, pieces);
    EXPECT_EQ(src, dst) << pieces << " pieces";
  }
}
