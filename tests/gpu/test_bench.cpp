// The bench's runner on a small case: every row verified, each with all its
// runs, the rows the targets look for present, and peers' fixed costs
// measured. No figure is judged here (no timing assertions): the targets
// do that on the GPU machine, in `sluice bench`.
#include <gtest/gtest.h>

#include <cmath>

#include "bench.hpp"
#include "gpu_test.hpp"
#include "measure.hpp"
#include "noise.hpp"
#include "targets.hpp"

using namespace sluice;
using namespace sluice::bench;

namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;

const MeasuredRow* find(const BenchResult& r, const std::string& method) {
  for (const auto& row : r.rows)
    if (row.method == method) return &row;
  return nullptr;
}
}  // namespace

class BenchRunnerTest : public test::GpuTest {};

TEST_F(BenchRunnerTest, ASmallCaseMeasuresEveryRowTheTargetsNeed) {
  BenchOptions o;
  o.workloads = {workloads::parse_workload("copy")};
  o.sizes = {4 * MiB};
  o.repeats = 1;
  o.staircase_streams = {2, 4};
  o.triple_buffer_chunk_bytes = {MiB, 2 * MiB};
  const BenchResult r = run_bench(o);
  ASSERT_EQ(r.cases.size(), 1u);
  const int rounds = rounds_for(4 * MiB, o.repeats);
  for (const auto& row : r.rows) {
    if (!row.measured()) continue;
    EXPECT_TRUE(row.verified) << row.method << ": " << row.detail;
    EXPECT_EQ(row.samples.size(), static_cast<std::size_t>(rounds)) << row.method;
    EXPECT_GT(row.bound_ms, 0) << row.method;
  }
  ASSERT_NE(find(r, row_names::pinned), nullptr);
  ASSERT_NE(find(r, row_names::pinned_again), nullptr);
  const MeasuredRow* replayed = find(r, row_names::replayed);
  ASSERT_NE(replayed, nullptr);
  EXPECT_EQ(replayed->kind, RowKind::sluice_replayed);
  EXPECT_TRUE(replayed->measured() || !replayed->unavailable.empty());
  // The best triple buffer's fixed costs, from its recorded runs.
  bool peer_costs = false;
  for (const auto& row : r.rows)
    if (row.kind == RowKind::hand_written && row.method.rfind("triple buffer", 0) == 0 && row.overhead) {
      peer_costs = true;
      EXPECT_TRUE(std::isfinite(row.overhead->start_ms) && std::isfinite(row.overhead->end_ms));
      EXPECT_GT(row.overhead->host_us_per_chunk, 0);
    }
  EXPECT_TRUE(peer_costs);
  const auto checks = check_targets(r);
  EXPECT_TRUE(std::any_of(checks.begin(), checks.end(), [](const TargetCheck& c) {
    return c.target == std::string(target_names::same_engine) && c.verdict != Verdict::not_measured;
  }));
}

TEST_F(BenchRunnerTest, PoisonReachesEveryElementOfALargeOutput) {
  workloads::Problem p(workloads::parse_workload("copy"), (200 * MiB) / sizeof(float) + 3,
                       workloads::Problem::Memory::pinned);
  std::fill(p.output().begin(), p.output().end(), 1.0f);
  p.poison_output();
  EXPECT_TRUE(std::all_of(p.output().begin(), p.output().end(), [](float v) { return std::isnan(v); }));
}

TEST_F(BenchRunnerTest, AMeasurementWithNoResultSaysSoInsteadOfPassing) {
  workloads::Problem p(workloads::parse_workload("copy"), 1024, workloads::Problem::Memory::pinned);
  workloads::Contender host_only{"host copies", &p, RowKind::hand_written, [] {}};
  host_only.checks_result = false;
  const auto rows = workloads::measure_in_rounds({host_only}, 3);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_FALSE(rows[0].verified);
  EXPECT_FALSE(rows[0].detail.empty());
  EXPECT_EQ(rows[0].samples.size(), 3u);
}
