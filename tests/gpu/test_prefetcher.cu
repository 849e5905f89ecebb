// The training prefetcher: exactly the planned tokens, ready in the
// consumer's stream order, slots never refilled under the consumer, resumable.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "gpu_test.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/device_scope.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/host_fn.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/loader/batch_plan.hpp"
#include "sluice/loader/prefetcher.hpp"
#include "sluice/loader/token_windows.hpp"
#include "sluice/pipeline/file_io.hpp"
#include "ring/pinned_slots.hpp"
#include "test_kernels.cuh"

using sluice::LoaderOptions;
using sluice::LoaderState;
using sluice::TokenLoader;

namespace {

__global__ void spin_then_copy(long long cycles, const std::int32_t* from, std::int32_t* to, std::size_t n) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    to[i] = from[i];
}

std::uint32_t token_at(std::size_t shard, std::size_t position, std::size_t width) {
  const std::uint64_t v = shard * 100'003 + position * 7 + 1;
  return static_cast<std::uint32_t>(width == 2 ? v % 65'521 : v % 4'000'000'007ull);
}

class PrefetcherTest : public sluice::test::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    dir_ = std::filesystem::temp_directory_path() / ("sluice-prefetch-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Shards of the given lengths; returns their glob pattern.
  std::string shards(const std::vector<std::size_t>& lengths, std::size_t width, const std::string& stem = "shard") {
    for (std::size_t s = 0; s < lengths.size(); ++s) {
      std::vector<std::uint32_t> tokens(lengths[s]);
      for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = token_at(s, i, width);
      sluice::write_shard((dir_ / (stem + "_" + std::to_string(s) + ".bin")).string(), tokens, width);
    }
    return (dir_ / (stem + "_*.bin")).string();
  }
  // The rows a batch must hold, from the plan and the windows alone.
  static std::vector<std::int32_t> expected(const sluice::TokenWindows& windows, const sluice::BatchPlan& plan,
                                            LoaderState at, std::size_t width, bool targets) {
    std::vector<std::int32_t> rows;
    for (std::size_t r = 0; r < plan.batch_rows(at); ++r) {
      const auto w = windows.window(plan.item(at, r));
      for (std::size_t t = 0; t < windows.seq(); ++t)
        rows.push_back(static_cast<std::int32_t>(token_at(w.shard, w.first_token + t + (targets ? 1 : 0), width)));
    }
    return rows;
  }
  std::filesystem::path dir_;
};

std::vector<std::int32_t> to_host(std::span<const std::int32_t> device, sluice::StreamView stream) {
  std::vector<std::int32_t> host(device.size());
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(host.data(), device.data(), device.size_bytes(), cudaMemcpyDeviceToHost, stream.get()));
  stream.synchronize();
  return host;
}

}  // namespace

TEST_F(PrefetcherTest, EveryBatchHoldsThePlannedTokensForBothWidths) {
  for (std::size_t width : {2u, 4u}) {
    const auto pattern = shards({1000, 257, 3000}, width, "w" + std::to_string(width));
    LoaderOptions o;
    o.batch = 5;
    o.shuffle = true;
    o.seed = 99;
    o.ahead = 2;
    sluice::Stream step;  // outlives the loader, which frees its slots in this stream's order
    TokenLoader loader({pattern}, 16, o);
    EXPECT_EQ(loader.token_bytes(), width);
    const sluice::TokenWindows windows(sluice::open_shards({pattern}), 16);
    const sluice::BatchPlan plan(windows.count(), {5, true, 99, 0, 1, false});
    ASSERT_EQ(loader.windows(), windows.count());
    std::size_t checked = 0;
    for (std::size_t i = 0; i < 2 * plan.batches_per_epoch(); ++i) {  // two epochs, across every shard boundary
      const auto batch = loader.next(step);
      ASSERT_EQ(batch.rows, plan.batch_rows(batch.position));
      ASSERT_EQ(to_host(batch.inputs, step), expected(windows, plan, batch.position, width, false)) << "batch " << i;
      ASSERT_EQ(to_host(batch.targets, step), expected(windows, plan, batch.position, width, true)) << "batch " << i;
      EXPECT_EQ(batch.last_of_epoch, plan.last_of_epoch(batch.position));
      checked += batch.rows;
    }
    EXPECT_EQ(checked, 2 * windows.count());
  }
}

TEST_F(PrefetcherTest, ASlowStepThatReadsLateSeesItsOwnBatch) {
  // Each step spins 0.3 ms, then reads its batch: if a slot were refilled
  // before the consumer's stream released it, a step would read a later
  // batch. The host never waits, so the loader runs as far ahead as it may.
  const auto pattern = shards({20'000}, 2);
  LoaderOptions o;
  o.batch = 8;
  o.ahead = 1;
  sluice::Stream step;  // outlives the loader, which frees its slots in this stream's order
  TokenLoader loader({pattern}, 64, o);
  const sluice::TokenWindows windows(sluice::open_shards({pattern}), 64);
  const sluice::BatchPlan plan(windows.count(), {8, false, 0, 0, 1, false});
  const std::size_t steps = 40, per = 8 * 64;
  sluice::DeviceBuffer<std::int32_t> seen(steps * per, step);
  int khz = 0;
  SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  std::vector<LoaderState> positions;
  for (std::size_t s = 0; s < steps; ++s) {
    const auto batch = loader.next(step);
    positions.push_back(batch.position);
    spin_then_copy<<<4, 256, 0, step.get()>>>(khz * 3 / 10, batch.inputs.data(), seen.data() + s * per, batch.inputs.size());
    SLUICE_CUDA_CHECK(cudaGetLastError());
  }
  std::vector<std::int32_t> host(steps * per);
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(host.data(), seen.data(), host.size() * 4, cudaMemcpyDeviceToHost, step.get()));
  step.synchronize();
  for (std::size_t s = 0; s < steps; ++s) {
    const auto want = expected(windows, plan, positions[s], 2, false);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), host.begin() + static_cast<std::ptrdiff_t>(s * per))) << "step " << s;
  }
  const auto idle = loader.idle();
  EXPECT_EQ(idle.steps, steps);
  EXPECT_GE(idle.waited_ms, 0.0);
  EXPECT_GT(idle.loop_ms, 0.0);
  EXPECT_GE(idle.idle_fraction(), 0.0);
  EXPECT_LE(idle.idle_fraction(), 1.0);
}

TEST_F(PrefetcherTest, ASavedStateResumesTheIdenticalBatches) {
  const auto pattern = shards({5000, 4000}, 2);
  LoaderOptions o;
  o.batch = 7;
  o.shuffle = true;
  o.seed = 5;
  sluice::Stream step;
  std::vector<std::vector<std::int32_t>> straight;
  LoaderState saved;
  {
    TokenLoader loader({pattern}, 32, o);
    for (int i = 0; i < 30; ++i) {
      if (i == 17) saved = loader.state();
      straight.push_back(to_host(loader.next(step).inputs, step));
    }
  }
  o.start = saved;
  TokenLoader resumed({pattern}, 32, o);
  for (int i = 17; i < 30; ++i)
    ASSERT_EQ(to_host(resumed.next(step).inputs, step), straight[static_cast<std::size_t>(i)]) << "batch " << i;
}

// The first token of a window identifies it here (position * 7 + 1 is distinct per window).
std::vector<std::int32_t> first_tokens(const std::vector<std::int32_t>& rows, std::size_t seq) {
  std::vector<std::int32_t> firsts;
  for (std::size_t r = 0; r * seq < rows.size(); ++r) firsts.push_back(rows[r * seq]);
  return firsts;
}

TEST_F(PrefetcherTest, RanksServeTheSameBatchCountAndDisjointWindows) {
  // 299 windows over 3 ranks of 4: dropped, the ranks are disjoint; padded
  // (the default), every window is served and the last global batch repeats one.
  const auto pattern = shards({3000}, 2);
  sluice::Stream step;
  for (bool drop_last : {true, false}) {
    std::vector<std::int32_t> firsts;
    for (std::size_t rank = 0; rank < 3; ++rank) {
      LoaderOptions o;
      o.batch = 4;
      o.shuffle = true;
      o.seed = 1;
      o.rank = rank;
      o.world = 3;
      o.drop_last = drop_last;
      TokenLoader loader({pattern}, 10, o);
      EXPECT_EQ(loader.batches_per_epoch(), drop_last ? 299u / 12 : 299u / 12 + 1);
      for (std::size_t b = 0; b < loader.batches_per_epoch(); ++b) {
        const auto batch = loader.next(step);
        ASSERT_EQ(batch.rows, 4u);
        for (auto first : first_tokens(to_host(batch.inputs, step), 10)) firsts.push_back(first);
      }
    }
    std::sort(firsts.begin(), firsts.end());
    const auto distinct = static_cast<std::size_t>(std::unique(firsts.begin(), firsts.end()) - firsts.begin());
    EXPECT_EQ(distinct, drop_last ? 299u / 12 * 12 : 299u) << (drop_last ? "dropped" : "padded");
  }
}

TEST_F(PrefetcherTest, AStateSavedOnFourRanksResumesOnTwoWithTheSameGlobalBatches) {
  // Four loaders (ranks) of 3 rows run 40 steps; their state after 25 goes
  // to two loaders of 6 rows. Each resumed global batch, the two ranks' rows
  // in rank order, holds the tokens of the uninterrupted job's.
  const auto pattern = shards({4000, 3000}, 2);
  sluice::Stream step;
  auto options = [](std::size_t rank, std::size_t world, std::size_t batch, LoaderState start) {
    LoaderOptions o;
    o.batch = batch;
    o.shuffle = true;
    o.seed = 17;
    o.rank = rank;
    o.world = world;
    o.start = start;
    return o;
  };
  const std::size_t steps = 40, saved_at = 25;  // 699 windows: 59 global batches of 12 an epoch
  std::vector<std::vector<std::int32_t>> straight(steps);
  LoaderState saved;
  for (std::size_t rank = 0; rank < 4; ++rank) {
    TokenLoader loader({pattern}, 10, options(rank, 4, 3, {}));
    for (std::size_t s = 0; s < steps; ++s) {
      if (s == saved_at && rank == 0) saved = loader.state();
      const auto rows = to_host(loader.next(step).inputs, step);
      straight[s].insert(straight[s].end(), rows.begin(), rows.end());
    }
  }
  std::vector<std::vector<std::int32_t>> resumed(steps);
  for (std::size_t rank = 0; rank < 2; ++rank) {
    TokenLoader loader({pattern}, 10, options(rank, 2, 6, saved));
    for (std::size_t s = saved_at; s < steps; ++s) {
      const auto rows = to_host(loader.next(step).inputs, step);
      resumed[s].insert(resumed[s].end(), rows.begin(), rows.end());
    }
  }
  for (std::size_t s = saved_at; s < steps; ++s) ASSERT_EQ(resumed[s], straight[s]) << "global batch " << s;
}

TEST_F(PrefetcherTest, AShardTruncatedMidEpochNamesFileAndOffset) {
  const auto pattern = shards({20'000}, 2);
  const std::string file = (dir_ / "shard_0.bin").string();
  LoaderOptions o;
  o.batch = 16;
  o.ahead = 1;
  sluice::Stream step;  // outlives the loader, which frees its slots in this stream's order
  TokenLoader loader({pattern}, 64, o);
  loader.next(step);
  std::filesystem::resize_file(file, 1024 + 2 * 5000);  // windows past token 5000 are gone
  try {
    for (int i = 0; i < 100; ++i) loader.next(step);
    FAIL() << "a short read went unnoticed";
  } catch (const sluice::ShardError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("shard_0.bin: read of 130 bytes at offset"), std::string::npos) << what;
    EXPECT_NE(what.find("ended early"), std::string::npos) << what;
  }
}

TEST_F(PrefetcherTest, DestroyedWithBatchesInFlightJoinsAndLeaksNothing) {
  const auto pattern = shards({50'000}, 2);
  sluice::Stream step;
  for (int round = 0; round < 5; ++round) {
    LoaderOptions o;
    o.batch = 32;
    o.ahead = 4;
    TokenLoader loader({pattern}, 128, o);
    loader.next(step);
    loader.next(step);
  }  // readers and copies in flight: the destructor stops and waits
  step.synchronize();
}

// Another stream of the process is busy: a host function in it waits until
// the test lets it go (or 20 s pass). It holds no SM, so the loader's own
// copies and kernels run meanwhile. A loader that synchronised the device on
// its way out (cudaFreeHost does) would wait for that stream: it must wait
// only for its own work. Returns whether the other stream was still busy once
// the loader was gone.
namespace {
bool other_stream_busy_after_a_loader_goes(const std::string& pattern) {
  std::atomic<bool> let_go{false};
  sluice::Stream step, other;
  {
    LoaderOptions o;
    o.batch = 8;
    TokenLoader loader({pattern}, 64, o);  // made first: allocating pinned memory may wait for the device
    sluice::enqueue_host(other, [&let_go] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!let_go && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    loader.next(step);
    loader.next(step);
  }
  const cudaError_t busy = cudaStreamQuery(other.get());
  let_go = true;
  other.synchronize();
  return busy == cudaErrorNotReady;
}
}  // namespace

TEST_F(PrefetcherTest, DestroyingALoaderWaitsForItsOwnWorkNotForOtherStreams) {
  EXPECT_TRUE(other_stream_busy_after_a_loader_goes(shards({20'000}, 2)))
      << "the loader's destructor waited for another stream's work";
}

TEST_F(PrefetcherTest, ALoaderLetGoWhileThePinnedSlotsKeptAreFullWaitsForItsOwnWorkNotForOtherStreams) {
  // Other rings (a checkpoint's load, another prefetcher) gave back as many
  // pinned slots as are kept: the loader's slots go beyond the bound, and
  // freeing them there (cudaFreeHost) would wait for the whole device.
  const auto pattern = shards({20'000}, 2);
  // Sizes no loader asks for (its slots grow in whole MiB), up to the bound exactly.
  std::vector<sluice::PinnedBuffer<std::byte>> others;
  const std::size_t limit = sluice::detail::kept_pinned_limit(), slot = (std::size_t{4} << 20) + 4096;
  std::size_t kept = sluice::detail::kept_pinned_bytes();
  for (; kept + slot <= limit; kept += slot) others.push_back(sluice::detail::take_pinned_slot(slot));
  if (kept < limit) others.push_back(sluice::detail::take_pinned_slot(limit - kept));
  for (auto& buffer : others) sluice::detail::give_back_pinned_slot(std::move(buffer));
  ASSERT_GE(sluice::detail::kept_pinned_bytes(), sluice::detail::kept_pinned_limit());
  EXPECT_TRUE(other_stream_busy_after_a_loader_goes(pattern))
      << "the loader's destructor freed its pinned slots and waited for another stream's work";
}

TEST_F(PrefetcherTest, BatchesThatCannotFitAreRefusedBeforeTheFirst) {
  const auto pattern = shards({5000}, 2);
  LoaderOptions o;
  o.batch = std::size_t{1} << 32;  // 4 billion rows
  o.drop_last = false;
  EXPECT_THROW(TokenLoader({pattern}, 16, o), std::invalid_argument);
  o.batch = 1;
  o.ahead = 0;
  EXPECT_THROW(TokenLoader({pattern}, 16, o), std::invalid_argument);
}

TEST(RecordLoaderFile, APartialRecordAtTheEndIsRefusedBeforeAnyWork) {
  // 500 bytes of 48-byte records: 10 records and 20 bytes. Refused before
  // the loader touches the GPU, so this runs without one too.
  const auto file = std::filesystem::temp_directory_path() / ("sluice-records-" + std::to_string(getpid()) + ".bin");
  std::ofstream(file, std::ios::binary) << std::string(500, 'r');
  try {
    sluice::RecordLoader loader(file.string(), 48);
    ADD_FAILURE() << "20 trailing bytes were dropped silently";
  } catch (const sluice::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("ends in a partial record: 500 bytes after the 0-byte header are 10 records of 48 "
                                         "bytes and 20 bytes more"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(e.offset(), 480u);
  }
  std::filesystem::remove(file);
}

TEST_F(PrefetcherTest, APartialRecordIsLeftOnlyWhenAskedAndCounted) {
  const std::string file = (dir_ / "partial.bin").string();
  std::ofstream(file, std::ios::binary) << std::string(16, 'h') << std::string(500, 'r');
  sluice::RecordLoader loader(file, 48, {}, {.header_bytes = 16, .ignore_partial_record = true});
  EXPECT_EQ(loader.records(), 10u);
  EXPECT_EQ(loader.trailing_bytes(), 20u);
}

TEST_F(PrefetcherTest, RecordsComeOverAsTheyAre) {
  const std::string file = (dir_ / "records.bin").string();
  const std::size_t record = 12, count = 1000;
  {
    std::ofstream out(file, std::ios::binary);
    out << std::string(64, 'h');  // a header
    for (std::size_t r = 0; r < count; ++r)
      for (std::size_t b = 0; b < record; ++b) out.put(static_cast<char>((r * 31 + b) % 251));
  }
  LoaderOptions o;
  o.batch = 9;
  o.shuffle = true;
  o.seed = 3;
  sluice::Stream step;  // outlives the loader, which frees its slots in this stream's order
  sluice::RecordLoader loader(file, record, o, {.header_bytes = 64});
  EXPECT_EQ(loader.records(), count);
  const sluice::BatchPlan plan(count, {9, true, 3, 0, 1, false});
  for (std::size_t i = 0; i < plan.batches_per_epoch(); ++i) {
    const auto batch = loader.next(step);
    std::vector<std::byte> host(batch.records.size());
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(host.data(), batch.records.data(), host.size(), cudaMemcpyDeviceToHost, step.get()));
    step.synchronize();
    for (std::size_t r = 0; r < batch.rows; ++r) {
      const std::size_t item = plan.item(batch.position, r);
      for (std::size_t b = 0; b < record; ++b)
        ASSERT_EQ(static_cast<int>(host[r * record + b]), static_cast<int>((item * 31 + b) % 251)) << "batch " << i;
    }
  }
}

TEST_F(PrefetcherTest, ALoaderOnAnotherDeviceWorksThereAndLeavesTheCurrentOneAlone) {
  int count = 0;
  SLUICE_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count < 2) GTEST_SKIP() << "needs two GPUs: a loader on device 1 while device 0 is current";
  SLUICE_CUDA_CHECK(cudaSetDevice(0));
  const auto pattern = shards({20'000}, 2);
  std::optional<sluice::Stream> step;
  {
    const sluice::DeviceScope scope(1);  // the step's stream is on the loader's device
    step.emplace();
  }
  {
    LoaderOptions o;
    o.batch = 8;
    o.device = 1;
    TokenLoader loader({pattern}, 64, o);
    for (int i = 0; i < 4; ++i) {
      const sluice::TokenBatch b = loader.next(*step);
      cudaPointerAttributes where{};
      SLUICE_CUDA_CHECK(cudaPointerGetAttributes(&where, b.inputs.data()));
      EXPECT_EQ(where.device, 1) << "batch " << i;
    }
    step->synchronize();
    EXPECT_EQ(loader.idle().steps, 4u);
    int current = -1;
    SLUICE_CUDA_CHECK(cudaGetDevice(&current));
    EXPECT_EQ(current, 0) << "the loader changed the caller's current device";
  }
}
