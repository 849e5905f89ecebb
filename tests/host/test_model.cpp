#include "sluice/measure/model.hpp"

#include <gtest/gtest.h>

using sluice::ChunkPlan;
using sluice::Lane;
using sluice::ModelInput;
using sluice::predict;

namespace {

// No fixed costs, round rates, one array in and one out of 1-byte items in
// equal chunks: timelines that can be worked out by hand.
ModelInput plain(std::size_t items, std::size_t chunk) {
  ModelInput in;
  in.fixed = {0, 0, 0, 0, 0, 0};
  in.rates.h2d_gbps = in.rates.d2h_gbps = 50;
  in.rates.both_gbps = 100;
  in.spans = sluice::array_spans(1, 1, 1, false);
  in.items = items;
  in.options.chunk_items = chunk;
  return in;
}

const sluice::StageInterval* find(const sluice::Prediction& p, Lane lane, std::size_t chunk) {
  for (const auto& i : p.timeline)
    if (i.lane == lane && i.chunk == chunk) return &i;
  return nullptr;
}

}  // namespace

TEST(Model, OneChunkIsCopyThenKernelThenCopy) {
  ModelInput in = plain(100'000'000, 100'000'000);  // 100 MB: 2 ms each way at 50 GB/s
  in.kernel.ms_per_item = 3.0 / 100'000'000;        // 3 ms
  in.fixed.copy_ms = 0.01;
  in.fixed.launch_ms = 0.02;
  in.fixed.run_ms = 0.05;
  const auto p = predict(in);
  EXPECT_NEAR(p.ms, 0.01 + 2 + 0.02 + 3 + 0.01 + 2 + 0.05, 1e-9);
  EXPECT_NEAR(find(p, Lane::compute, 0)->start_ms, 2.03, 1e-9);
  EXPECT_EQ(p.busiest, "compute");
}

TEST(Model, ComputeBoundChunksOverlapTheirCopies) {
  ModelInput in = plain(100'000'000, 50'000'000);  // 2 chunks: 1 ms copies, 10 ms kernels
  in.kernel.ms_per_item = 10.0 / 50'000'000;
  const auto p = predict(in);
  // h2d0 [0,1] k0 [1,11] k1 [11,21] d2h0 [11,12] d2h1 [21,22]
  EXPECT_NEAR(find(p, Lane::h2d, 1)->end_ms, 2, 1e-9);
  EXPECT_NEAR(find(p, Lane::compute, 1)->start_ms, 11, 1e-9);
  EXPECT_NEAR(find(p, Lane::d2h, 0)->start_ms, 11, 1e-9);
  EXPECT_NEAR(p.ms, 22, 1e-9);
}

TEST(Model, CopiesInBothDirectionsShareTheLink) {
  ModelInput in = plain(200'000'000, 100'000'000);  // 2 chunks of 100 MB
  in.rates.both_gbps = 50;                          // at once, each direction gets 25 GB/s
  const auto p = predict(in);
  // h2d0 [0,2] alone; then h2d1 and d2h0 together at 25 GB/s: [2,6]; d2h1 alone [6,8].
  EXPECT_NEAR(find(p, Lane::h2d, 1)->start_ms, 2, 1e-9);
  EXPECT_NEAR(find(p, Lane::h2d, 1)->end_ms, 6, 1e-9);
  EXPECT_NEAR(find(p, Lane::d2h, 0)->end_ms, 6, 1e-9);
  EXPECT_NEAR(p.ms, 8, 1e-9);
}

TEST(Model, DepthOneSerializesOnTheDeviceSlot) {
  ModelInput in = plain(100'000'000, 50'000'000);  // 1 ms copies
  in.kernel.ms_per_item = 2.0 / 50'000'000;        // 2 ms kernels
  in.options.depth = 1;
  const auto p = predict(in);
  // h2d0 [0,1] k0 [1,3] d2h0 [3,4] h2d1 [4,5] k1 [5,7] d2h1 [7,8]
  EXPECT_NEAR(find(p, Lane::h2d, 1)->start_ms, 4, 1e-9);
  EXPECT_NEAR(p.ms, 8, 1e-9);
}

TEST(Model, StagedInputsWaitForTheHostAndFreeSlotsBehindTheirCopy) {
  ModelInput in = plain(500'000'000, 100'000'000);  // 5 chunks of 100 MB: 2 ms copies
  in.spans = {{sluice::SpanRole::input, sluice::HostPath::staged, 1}};
  in.rates.stage_in_gbps = 25;  // 4 ms per chunk: the host is the pace
  // Three pinned slots (100 MB chunks): the host runs ahead, each H2D right
  // behind its stage-in: s0 [0,4] s1 [4,8] ... s4 [16,20] h4 [20,22]
  const auto p = predict(in);
  EXPECT_NEAR(find(p, Lane::stage_in, 1)->start_ms, 4, 1e-9);
  EXPECT_NEAR(find(p, Lane::h2d, 0)->start_ms, 4, 1e-9);
  EXPECT_NEAR(p.ms, 22, 1e-9);
  // A slow link holds the slots: stage-in 3 waits for the H2D of chunk 0.
  in.rates.stage_in_gbps = 1000;  // 0.1 ms per chunk
  in.rates.h2d_gbps = 10;         // 10 ms per H2D
  const auto slow = predict(in);
  EXPECT_NEAR(find(slow, Lane::stage_in, 3)->start_ms, find(slow, Lane::h2d, 0)->end_ms, 1e-9);
}

TEST(Model, StagingSeenBesideTheCopiesIsSlowedToTheSharedTerm) {
  // Staging alone 25 ms, sharing host memory with the copies 35 ms
  // (test_bound.cpp): a staged run sees 5/7 of each staging rate.
  sluice::RunVolume v;
  v.h2d_bytes = v.staged_in_bytes = 1e9;
  v.d2h_bytes = v.staged_out_bytes = 1e9;
  sluice::EngineRates r;
  r.h2d_gbps = r.d2h_gbps = 55;
  r.both_gbps = 100;
  r.stage_in_gbps = 90;
  r.stage_out_gbps = 120;
  r.stage_both_gbps = 80;
  r.staging_beside_link = {40, 100};
  const auto seen = sluice::staging_beside_copies(v, r);
  EXPECT_NEAR(seen.stage_both_gbps, 80.0 * 5 / 7, 1e-9);
  EXPECT_NEAR(seen.stage_in_gbps, 90.0 * 5 / 7, 1e-9);
  EXPECT_NEAR(seen.stage_out_gbps, 120.0 * 5 / 7, 1e-9);
  EXPECT_EQ(seen.h2d_gbps, 55);
  r.staging_beside_link = {};  // unknown: the rates as they are
  EXPECT_EQ(sluice::staging_beside_copies(v, r).stage_both_gbps, 80);
}

TEST(Model, NoChunksCostsTheRunAlone) {
  ModelInput in = plain(0, 1);
  in.fixed.run_ms = 0.05;
  EXPECT_DOUBLE_EQ(predict(in).ms, 0.05);
}

TEST(Model, RefusesUnknownRatesItNeeds) {
  ModelInput in = plain(1000, 100);
  in.rates.h2d_gbps = 0;
  EXPECT_THROW(predict(in), std::invalid_argument);
  in = plain(1000, 100);
  in.spans = sluice::array_spans(1, 1, 1, true);  // staged, with no staging rate known
  EXPECT_THROW(predict(in), std::invalid_argument);
}

TEST(Model, FitsLatencyAndRateFromTwoSizes) {
  // 64 KiB in 5.1 us and 64 MiB in 1213.5 us: ~55 GB/s after ~3.9 us.
  const auto f = sluice::fit_latency_rate(65536, 0.0051, 67108864, 1.2135);
  EXPECT_NEAR(f.gbps, 55.5, 0.2);
  EXPECT_NEAR(f.latency_ms, 0.0039, 0.0002);
  EXPECT_THROW(sluice::fit_latency_rate(10, 1, 5, 2), std::invalid_argument);
}

TEST(Model, PlaysTheChunksAPipelineLearnsForItsKernels) {
  // 64 MiB of floats at 50 GB/s each way: 1.34 ms of copies in each direction.
  ModelInput in;
  in.fixed = {0, 0, 0, 0, 0, 0};
  in.rates.h2d_gbps = in.rates.d2h_gbps = 50;
  in.rates.both_gbps = 100;
  in.spans = sluice::array_spans(1, 1, sizeof(float), false);
  in.items = 16 << 20;
  in.kernel.ms_per_item = 1.0 / static_cast<double>(in.items);  // 1 ms: the copies decide
  EXPECT_FALSE(sluice::schedule_of(in).plan().is_ramped());
  in.kernel.ms_per_item = 5.0 / static_cast<double>(in.items);  // 5 ms: the kernels do
  const sluice::Schedule kernel_bound = sluice::schedule_of(in);
  ASSERT_TRUE(kernel_bound.plan().is_ramped());
  EXPECT_EQ(kernel_bound.plan().chunk(0).size() * sizeof(float), 512u << 10);
  const auto p = predict(in);
  ASSERT_NE(find(p, Lane::h2d, 0), nullptr);
  EXPECT_EQ(find(p, Lane::h2d, 0)->bytes, 512u << 10);
  // As a pipeline told not to adapt: the usual equal chunks.
  in.options.adapt_chunks = false;
  EXPECT_FALSE(sluice::schedule_of(in).plan().is_ramped());
}
