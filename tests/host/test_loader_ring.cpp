// The loaders' engine on the ring (loader/loader_ring.hpp), run on the host
// executor over a record file read as RecordLoader reads it: the batches and
// their order, epochs, resume, a short last batch, a failed read, and stopping.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "loader_ring_test.hpp"

namespace sluice::test {

namespace {
constexpr std::size_t record_bytes = 40;
}

class LoaderRingJitter : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(LoaderRingJitter, BatchesFollowThePlanEpochAfterEpoch) {
  RecordFileFixture file(23, record_bytes);
  HostRingExecutor executor({.jitter_us = 150, .seed = GetParam()});
  const LoaderOptions o = loader_options(4, /*shuffle=*/true, /*ahead=*/2);
  Taken taken;
  within(std::chrono::seconds(30), "a loader ring over three epochs", [&] {
    LoaderRing ring(batch_plan(23, o), file.source(), executor, o);
    take_batches(ring, executor, 18, record_bytes, taken);
  });
  const auto seen = settled(taken);
  expect_same_batches(seen, planned(batch_plan(23, o), {}, 18));
  // 23 records in batches of 4: five full, then 3 rows, each epoch; each epoch's order its own.
  for (std::size_t b = 0; b < 18; ++b) {
    EXPECT_EQ(seen[b].rows, b % 6 == 5 ? 3u : 4u) << b;
    EXPECT_EQ(seen[b].last_of_epoch, b % 6 == 5) << b;
    EXPECT_EQ(seen[b].position.epoch, b / 6) << b;
  }
  EXPECT_NE(seen[0].records, seen[6].records) << "the shuffle is the same every epoch";
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
  expect_nothing_held(executor);
}

INSTANTIATE_TEST_SUITE_P(Seeds, LoaderRingJitter, ::testing::Range<std::uint64_t>(1, 9));

TEST(LoaderRing, AShortLastBatchHoldsTheEpochsLastRecords) {
  RecordFileFixture file(10, record_bytes);
  HostRingExecutor executor;
  const LoaderOptions o = loader_options(4, /*shuffle=*/false);
  Taken taken;
  {
    LoaderRing ring(batch_plan(10, o), file.source(), executor, o);
    take_batches(ring, executor, 4, record_bytes, taken);
  }
  const auto seen = settled(taken);
  EXPECT_EQ(seen[2].rows, 2u);
  EXPECT_EQ(seen[2].records, (std::vector<std::size_t>{8, 9}));
  EXPECT_TRUE(seen[2].last_of_epoch);
  EXPECT_EQ(seen[2].wrong, 0u);
  EXPECT_EQ(seen[3].records, (std::vector<std::size_t>{0, 1, 2, 3}));
  EXPECT_EQ(seen[3].position, (LoaderState{1, 0}));
}

TEST(LoaderRing, ResumedFromAStateItServesWhatTheUninterruptedRunServed) {
  RecordFileFixture file(30, record_bytes);
  LoaderOptions o = loader_options(4, /*shuffle=*/true);
  Taken straight, before, after;
  {
    HostRingExecutor executor({.jitter_us = 100, .seed = 3});
    LoaderRing ring(batch_plan(30, o), file.source(), executor, o);
    take_batches(ring, executor, 14, record_bytes, straight);
  }
  LoaderState saved;
  {
    HostRingExecutor executor({.jitter_us = 100, .seed = 4});
    LoaderRing ring(batch_plan(30, o), file.source(), executor, o);
    take_batches(ring, executor, 9, record_bytes, before);  // into the second epoch (8 batches an epoch)
    saved = ring.state();
  }  // with batches read ahead, and in flight
  o.start = saved;
  {
    HostRingExecutor executor({.jitter_us = 100, .seed = 5});
    LoaderRing ring(batch_plan(30, o), file.source(), executor, o);
    EXPECT_EQ(ring.state(), saved);
    take_batches(ring, executor, 5, record_bytes, after);
  }
  const auto all = settled(straight), resumed = settled(after);
  EXPECT_EQ(saved, all[9].position);
  expect_same_batches(resumed, std::vector<SeenBatch>(all.begin() + 9, all.end()));
}

TEST(LoaderRing, AFailedReadFailsItsBatchWithTheReadsOwnError) {
  RecordFileFixture file(20, record_bytes);
  HostRingExecutor executor({.jitter_us = 50});
  const LoaderOptions o = loader_options(4, /*shuffle=*/false, /*ahead=*/3);
  Taken taken;
  within(std::chrono::seconds(30), "a loader ring with a failing read", [&] {
    LoaderRing ring(batch_plan(20, o), file.source({9}), executor, o);
    take_batches(ring, executor, 2, record_bytes, taken);  // records 0 .. 7
    for (int attempt = 0; attempt < 2; ++attempt) {  // and again: the batch stays failed
      try {
        ring.next();
        ADD_FAILURE() << "batch 2, which holds record 9, came without its record";
      } catch (const IoError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(file.path()), std::string::npos) << what;
        EXPECT_NE(what.find("read of record 9 ended early"), std::string::npos) << what;
      }
    }
    EXPECT_EQ(ring.state(), (LoaderState{0, 8})) << "the failed batch is still the next one";
  });
  expect_same_batches(settled(taken), planned(batch_plan(20, o), {}, 2));
  expect_nothing_held(executor);
}

TEST(LoaderRing, AConsumerThatStopsAfterAnyFewBatchesLeavesNothingRunning) {
  RecordFileFixture file(40, record_bytes);
  const std::size_t threads = quiet_threads();
  for (std::size_t stop_after = 0; stop_after <= 7; ++stop_after) {
    HostRingExecutor executor({.jitter_us = 100, .seed = stop_after + 1});
    const LoaderOptions o = loader_options(3, /*shuffle=*/true, /*ahead=*/1 + stop_after % 4);
    Taken taken;
    within(std::chrono::seconds(30), "a loader ring stopped early", [&] {
      LoaderRing ring(batch_plan(40, o), file.source(), executor, o);
      take_batches(ring, executor, stop_after, record_bytes, taken);
    });
    const std::size_t reads = file.reads();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(file.reads(), reads) << "a read ran after the loader ring was gone, stopped after " << stop_after;
    expect_same_batches(settled(taken), planned(batch_plan(40, o), {}, stop_after));
    expect_nothing_held(executor);
  }
  EXPECT_LE(settled_threads(threads), threads) << "threads left running";
}

TEST(LoaderRing, DestroyedWhileReadsAreSlowItStopsAndJoins) {
  RecordFileFixture file(64, record_bytes);
  HostRingExecutor executor({.jitter_us = 300, .seed = 9});
  LoaderOptions o = loader_options(8, /*shuffle=*/false, /*ahead=*/4);
  LoaderSource slow = file.source();
  slow.read_row = [read = slow.read_row](std::size_t item, std::byte* row) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    read(item, row);
  };
  Taken taken;
  within(std::chrono::seconds(30), "a loader ring destroyed mid-read", [&] {
    LoaderRing ring(batch_plan(64, o), slow, executor, o);
    take_batches(ring, executor, 2, record_bytes, taken);
  });
  expect_same_batches(settled(taken), planned(batch_plan(64, o), {}, 2));
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
  expect_nothing_held(executor);
}

TEST(LoaderRing, AheadOutsideOneToThirtyIsRefusedBeforeAnyWork) {
  RecordFileFixture file(10, record_bytes);
  HostRingExecutor executor;
  for (std::size_t ahead : {0, 31}) {
    const LoaderOptions o = loader_options(2, false, ahead);
    EXPECT_THROW(LoaderRing(batch_plan(10, o), file.source(), executor, o), std::invalid_argument);
  }
  EXPECT_EQ(file.reads(), 0u);
  expect_nothing_held(executor);
}

TEST(LoaderRing, ReadersTakeAtLeast64KiBOfRowsAtOnce) {
  // A GPT step's batch (32 rows of 1025 uint16 tokens) is one piece: no reader is woken for it.
  EXPECT_GE(LoaderRing::rows_per_piece(32, 2050, 14), 32u);
  // The loader bench's 64 rows: two pieces of 32.
  EXPECT_EQ(LoaderRing::rows_per_piece(64, 2050, 14), 32u);
  // Large batches: about two pieces a reader.
  EXPECT_EQ(LoaderRing::rows_per_piece(4096, 2050, 16), 128u);
  // Rows larger than a piece: one at a time.
  EXPECT_EQ(LoaderRing::rows_per_piece(8, std::size_t{1} << 20, 4), 1u);
}

TEST(LoaderRing, ABatchOfOnePieceIsReadOnOneThreadWakingNoReader) {
  RecordFileFixture file(40, record_bytes);
  HostRingExecutor executor;
  LoaderOptions o = loader_options(8, /*shuffle=*/true);
  o.threads = 4;
  LoaderSource source = file.source();
  std::mutex mutex;
  std::map<std::size_t, std::set<std::thread::id>> threads_of_record;
  source.read_row = [read = source.read_row, &mutex, &threads_of_record](std::size_t item, std::byte* row) {
    read(item, row);
    std::lock_guard lock(mutex);
    threads_of_record[item].insert(std::this_thread::get_id());
  };
  Taken taken;
  {
    LoaderRing ring(batch_plan(40, o), std::move(source), executor, o);
    take_batches(ring, executor, 5, record_bytes, taken);  // one epoch
  }
  expect_same_batches(settled(taken), planned(batch_plan(40, o), {}, 5));
  for (const SeenBatch& batch : settled(taken)) {
    std::set<std::thread::id> readers;
    for (std::size_t record : batch.records) readers.insert(threads_of_record[record].begin(), threads_of_record[record].end());
    EXPECT_EQ(readers.size(), 1u) << "a batch of " << batch.rows << " rows of " << record_bytes << " bytes was read by "
                                  << readers.size() << " threads";
  }
}

}  // namespace sluice::test
