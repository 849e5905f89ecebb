// The ranks' plans of a sharded load (weights/shard_plan.hpp): replicated,
// every byte of every file read by exactly one rank into its place of the
// gathered buffer; tensor-parallel, each rank's part exactly torch.chunk's,
// and the parts together every element once.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "weights/shard_plan.hpp"

namespace sluice::test {

using weights::GatherPlan;
using weights::ShardedFile;
using weights::ShardRead;
using weights::SplitTensor;

namespace {

// Which (file, byte) lands at each byte of the buffer, by playing every rank's reads; -1: none (padding).
std::vector<std::int64_t> played(const GatherPlan& plan) {
  std::vector<std::int64_t> buffer(plan.buffer_bytes(), -1);
  for (std::size_t r = 0; r < plan.ranks(); ++r)
    for (const ShardRead& read : plan.reads(r)) {
      const ShardedFile& f = plan.files().at(read.file);
      RC_ASSERT(read.offset >= f.data_begin);
      RC_ASSERT(read.offset + read.bytes <= f.data_begin + f.data_bytes);  // within the file's data
      RC_ASSERT(read.to >= r * plan.share());
      RC_ASSERT(read.to + read.bytes <= (r + 1) * plan.share());  // within the rank's share
      for (std::uint64_t i = 0; i < read.bytes; ++i) {
        RC_ASSERT(buffer[read.to + i] == -1);  // written once
        buffer[read.to + i] = static_cast<std::int64_t>(read.file << 40 | (read.offset + i));
      }
    }
  return buffer;
}

}  // namespace

RC_GTEST_PROP(GatherPlanProperties, EveryByteOfEveryFileIsReadOnceIntoItsPlace, ()) {
  const auto sizes = *rc::gen::container<std::vector<std::uint64_t>>(*rc::gen::inRange<std::size_t>(0, 5),
                                                                     rc::gen::inRange<std::uint64_t>(0, 20000));
  std::vector<ShardedFile> files;
  for (std::size_t k = 0; k < sizes.size(); ++k) files.push_back({"f" + std::to_string(k), 8 + 100 * k, sizes[k]});
  const std::size_t ranks = *rc::gen::inRange<std::size_t>(1, 9);
  const std::size_t align = *rc::gen::element<std::size_t>(1, 256, 4096);
  const GatherPlan plan(files, ranks, align);
  RC_ASSERT(plan.share() % align == 0);
  const std::vector<std::int64_t> buffer = played(plan);
  for (std::size_t k = 0; k < files.size(); ++k) {
    RC_ASSERT(plan.file_at(k) % align == 0);
    for (std::uint64_t i = 0; i < files[k].data_bytes; ++i)
      RC_ASSERT(buffer.at(plan.file_at(k) + i) == static_cast<std::int64_t>(k << 40 | (files[k].data_begin + i)));
  }
  // No rank's share is more than an aligned equal part of the data and its padding.
  std::uint64_t laid_out = 0;
  for (std::size_t k = 0; k < files.size(); ++k) laid_out = plan.file_at(k) + files[k].data_bytes;
  RC_ASSERT(plan.share() < (laid_out + ranks - 1) / ranks + align);
}

TEST(GatherPlan, FourRanksReadAQuarterEachAcrossTwoFiles) {
  const GatherPlan plan({{"a", 100, 10000}, {"b", 200, 6000}}, 4, 4096);
  EXPECT_EQ(plan.file_at(1), 12288u);        // a's 10000 bytes, then b at the next 4 KiB
  EXPECT_EQ(plan.share(), 8192u);            // 18288 bytes in four shares of two pages
  const auto r1 = plan.reads(1);             // [8192, 16384): a's tail, then b's head
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0].file, 0u);
  EXPECT_EQ(r1[0].offset, 100u + 8192u);
  EXPECT_EQ(r1[0].bytes, 10000u - 8192u);
  EXPECT_EQ(r1[1].file, 1u);
  EXPECT_EQ(r1[1].offset, 200u);
  EXPECT_EQ(r1[1].to, 12288u);
  EXPECT_EQ(r1[1].bytes, 16384u - 12288u);
  EXPECT_TRUE(plan.reads(3).empty());        // past the data: padding only
  EXPECT_THROW(plan.reads(4), std::invalid_argument);
  EXPECT_THROW(GatherPlan({}, 0), std::invalid_argument);
  EXPECT_THROW(GatherPlan({}, 2, 3000), std::invalid_argument);
  EXPECT_THROW(GatherPlan({{"a", 0, UINT64_MAX - 10}, {"b", 0, 100}}, 2), std::invalid_argument);
}

namespace {

// A tensor whose element e holds e, as bytes in a file: element e at offset + e * element_bytes.
std::vector<std::uint64_t> part_elements(const SplitTensor& t, std::size_t rank, std::vector<std::int64_t>* shape) {
  const weights::TensorPart part = weights::part_of(t, rank);
  *shape = part.shape;
  std::uint64_t count = 1;
  for (auto d : part.shape) count *= static_cast<std::uint64_t>(d);
  std::vector<std::uint64_t> got(count, UINT64_MAX);
  for (const ShardRead& read : part.reads) {
    RC_ASSERT(read.bytes % t.element_bytes == 0);
    RC_ASSERT((read.offset - t.offset) % t.element_bytes == 0);
    for (std::uint64_t i = 0; i < read.bytes / t.element_bytes; ++i) {
      const std::uint64_t at = read.to / t.element_bytes + i;
      RC_ASSERT(at < count);
      RC_ASSERT(got[at] == UINT64_MAX);
      got[at] = (read.offset - t.offset) / t.element_bytes + i;
    }
  }
  return got;
}

}  // namespace

RC_GTEST_PROP(TensorPartProperties, EachRanksPartIsTorchChunksAndTheyCoverEveryElementOnce, ()) {
  SplitTensor t;
  t.shape = *rc::gen::container<std::vector<std::int64_t>>(*rc::gen::inRange<std::size_t>(1, 5),
                                                           rc::gen::inRange<std::int64_t>(0, 7));
  t.dim = *rc::gen::inRange<std::size_t>(0, t.shape.size());
  t.parts = *rc::gen::inRange<std::size_t>(1, 6);
  t.element_bytes = *rc::gen::element<std::size_t>(1, 2, 4);
  t.offset = 64;
  std::uint64_t total = 1;
  for (auto d : t.shape) total *= static_cast<std::uint64_t>(d);
  std::vector<int> seen(total, 0);
  const auto n = static_cast<std::uint64_t>(t.shape[t.dim]);
  const std::uint64_t chunk = (n + t.parts - 1) / t.parts;
  for (std::size_t r = 0; r < t.parts; ++r) {
    std::vector<std::int64_t> shape;
    const auto got = part_elements(t, r, &shape);
    // torch.chunk's part: indices [r * chunk, (r + 1) * chunk) along dim, clipped to n.
    const std::uint64_t first = std::min(n, r * chunk), last = std::min(n, first + chunk);
    RC_ASSERT(shape[t.dim] == static_cast<std::int64_t>(last - first));
    // The part's element k, in row-major order of its shape, is the tensor's element at the same
    // index with the split index shifted by `first`.
    for (std::uint64_t k = 0; k < got.size(); ++k) {
      std::uint64_t rest = k, flat = 0, stride = 1;
      std::vector<std::uint64_t> index(shape.size());
      for (std::size_t d = shape.size(); d-- > 0;) {
        index[d] = rest % static_cast<std::uint64_t>(shape[d]);
        rest /= static_cast<std::uint64_t>(shape[d]);
      }
      index[t.dim] += first;
      for (std::size_t d = t.shape.size(); d-- > 0;) {
        flat += index[d] * stride;
        stride *= static_cast<std::uint64_t>(t.shape[d]);
      }
      RC_ASSERT(got[k] == flat);
      ++seen[flat];
    }
  }
  for (int s : seen) RC_ASSERT(s == 1);
}

TEST(TensorPart, AColumnSplitReadsARunPerRow) {
  // A 3 x 10 BF16 tensor split in 4 along its columns: parts of 3, 3, 3 and 1 columns.
  const SplitTensor t{0, 1000, {3, 10}, 2, 1, 4};
  const auto part = weights::part_of(t, 3);
  EXPECT_EQ(part.shape, (std::vector<std::int64_t>{3, 1}));
  ASSERT_EQ(part.reads.size(), 3u);
  EXPECT_EQ(part.reads[1].offset, 1000u + (10 + 9) * 2u);
  EXPECT_EQ(part.reads[1].bytes, 2u);
  EXPECT_EQ(part.reads[1].to, 2u);
  // Split in 6 along 4 rows: chunks of one row, the last two empty.
  const auto empty = weights::part_of({0, 0, {4, 5}, 4, 0, 6}, 5);
  EXPECT_EQ(empty.shape, (std::vector<std::int64_t>{0, 5}));
  EXPECT_TRUE(empty.reads.empty());
  EXPECT_THROW(weights::part_of({0, 0, {4}, 1, 1, 2}, 0), std::invalid_argument);
  EXPECT_THROW(weights::part_of({0, 0, {-4}, 1, 0, 2}, 0), std::invalid_argument);
  EXPECT_THROW(weights::part_of({0, 0, {4}, 0, 0, 2}, 0), std::invalid_argument);
  EXPECT_THROW(weights::part_of({0, 0, {4}, 1, 0, 2}, 2), std::invalid_argument);
}

}  // namespace sluice::test
