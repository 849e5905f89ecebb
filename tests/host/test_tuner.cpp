#include "sluice/measure/tuner.hpp"

#include <gtest/gtest.h>

#include <set>

#include "pipeline/schedule/chunking.hpp"

using sluice::choose_with_model;
using sluice::ModelInput;
using sluice::PipelineOptions;
using sluice::sweep_settings;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Copy-bound floats on a 50 GB/s link each way, 100 both ways, a kernel that
// costs next to nothing: what chunk size wins is up to the fixed costs.
ModelInput copy_bound() {
  ModelInput in;
  in.fixed = {0, 0, 0, 0, 0, 0};
  in.rates.h2d_gbps = in.rates.d2h_gbps = 50;
  in.rates.both_gbps = 100;
  in.kernel.ms_per_item = 1e-9;
  in.spans = sluice::array_spans(1, 1, sizeof(float), false);
  in.items = 64 * MiB / sizeof(float);
  return in;
}

std::size_t chunk_bytes(const PipelineOptions& o) { return o.chunk_items * sizeof(float); }

}  // namespace

TEST(Tuner, SweepCoversChunkSizesUpToTheDataAndEveryDepth) {
  const std::size_t items = 64 * MiB / sizeof(float);
  const auto settings = sweep_settings(items, sizeof(float));
  std::set<std::size_t> chunks, depths;
  bool ramped = false, flat = false;
  for (const auto& o : settings) {
    chunks.insert(chunk_bytes(o));
    depths.insert(o.depth);
    (o.first_chunk_items > 0 ? ramped : flat) = true;
    EXPECT_GE(o.chunk_items, 1u);
    EXPECT_LT(o.first_chunk_items, o.chunk_items);
  }
  // One chunk of all the data is no pipeline: the largest leaves two.
  EXPECT_EQ(chunks, (std::set<std::size_t>{MiB, 2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB}));
  EXPECT_EQ(depths, (std::set<std::size_t>{2, 3, 4, 6}));
  EXPECT_TRUE(ramped && flat);
  // Small data stops at one chunk; large data gets a coarser sweep.
  for (const auto& o : sweep_settings(3 * MiB / sizeof(float), sizeof(float))) EXPECT_LE(chunk_bytes(o), 4 * MiB);
  EXPECT_LT(sweep_settings(4096 * MiB / sizeof(float), sizeof(float)).size(), settings.size());
}

TEST(Tuner, NoFixedCostsPickTheSmallestChunks) {
  // Nothing costs per chunk, so shorter fill and drain always win.
  const auto pick = choose_with_model(copy_bound());
  EXPECT_EQ(chunk_bytes(pick.options), MiB);
  // Between the link alone (64 MiB each way at 100 GB/s both ways) and equal
  // 1 MiB chunks (the first in and the last out alone, at 50).
  EXPECT_GE(pick.predicted_ms, 2.0 * 64 * MiB / 100e6);
  EXPECT_LE(pick.predicted_ms, 2.0 * 63 * MiB / 100e6 + 2.0 * MiB / 50e6 + 1e-9);
}

TEST(Tuner, CostlyCopiesPickLargeChunks) {
  // 1 ms per copy outweighs any fill and drain: the fewest chunks win.
  ModelInput in = copy_bound();
  in.fixed.copy_ms = 1;
  const auto pick = choose_with_model(in);
  EXPECT_GE(chunk_bytes(pick.options), 32 * MiB);
}

TEST(Tuner, WithSettingRunsTheBaseWithTheSettingsOptions) {
  PipelineOptions o;
  o.chunk_items = 1000;
  o.depth = 3;
  const ModelInput in = sluice::with_setting(copy_bound(), o);
  EXPECT_EQ(in.options.depth, 3u);
  EXPECT_EQ(in.options.chunk_items, 1000u);
  EXPECT_EQ(in.rates.both_gbps, 100);  // the rest is the base's
  EXPECT_EQ(in.items, copy_bound().items);
}

// The model plays the pipeline's own schedule: what chunks and slots a
// setting gets is the schedule's, with no copy of the rules in the tuner.
TEST(Tuner, TheModelSeesTheSchedulesChunksAndSlots) {
  ModelInput staged = copy_bound();
  staged.items = 256 * MiB / sizeof(float);
  staged.spans = sluice::array_spans(1, 1, sizeof(float), true);
  staged.rates.stage_in_gbps = staged.rates.stage_out_gbps = staged.rates.stage_both_gbps = 50;
  const auto both = sluice::plan_schedule(staged.options, staged.spans, staged.items);
  EXPECT_EQ(both.plan().chunk_items(), sluice::default_chunking(staged.items, sizeof(float), {.host_copies_both_ways = true}).chunk_items);
  EXPECT_EQ(both.ring_size(sluice::Ring::pinned_in), 6u);
  std::size_t stage_ins = 0;
  for (const auto& i : sluice::predict(staged).timeline) stage_ins += i.lane == sluice::Lane::stage_in;
  EXPECT_EQ(stage_ins, both.chunk_count());
  staged.spans = {{sluice::SpanRole::input, sluice::HostPath::staged, sizeof(float)}};  // staged one way only
  const auto in_only = sluice::plan_schedule(staged.options, staged.spans, staged.items);
  EXPECT_NE(both.plan().chunk_items(), in_only.plan().chunk_items());  // else this test tells nothing
}
