#include "targets.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "bench_rows.hpp"

using namespace sluice;
using namespace sluice::bench;
using namespace sluice::bench::testing;
namespace names = sluice::bench::target_names;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::vector<TargetCheck> of_target(const std::vector<TargetCheck>& checks, const char* target) {
  std::vector<TargetCheck> out;
  std::copy_if(checks.begin(), checks.end(), std::back_inserter(out),
               [&](const TargetCheck& c) { return c.target == target; });
  return out;
}

// The checks of a target that measured something: not the sizes a call left out.
std::vector<TargetCheck> measured(const std::vector<TargetCheck>& checks, const char* target) {
  std::vector<TargetCheck> out = of_target(checks, target);
  std::erase_if(out, [](const TargetCheck& c) { return c.verdict == Verdict::not_measured; });
  return out;
}

// One pinned case: sluice, its second pipeline, a hand-written peer and a PyTorch row.
BenchResult pinned_case(std::size_t bytes, double sluice_ms, double peer_ms, double torch_ms, double efficiency = 0.99) {
  BenchResult r;
  r.cases.push_back(case_of("copy", bytes));
  r.rows.push_back(row("copy", bytes, "synchronous", RowKind::hand_written, runs(2 * peer_ms)));
  r.rows.push_back(row("copy", bytes, "triple buffer (best of sweep)", RowKind::hand_written, runs(peer_ms)));
  r.rows.push_back(row("copy", bytes, row_names::pinned, RowKind::sluice, runs(sluice_ms), efficiency));
  r.rows.push_back(row("copy", bytes, row_names::pinned_again, RowKind::sluice, runs(sluice_ms * 1.005), efficiency));
  r.rows.push_back(row("copy", bytes, "PyTorch, pinned (best of sweep)", RowKind::pytorch, runs(torch_ms)));
  r.rows.push_back(row("copy", bytes, "PyTorch, pageable, .to('cuda')", RowKind::pytorch, runs(torch_ms / 10), 0.5,
                       "pageable"));  // pageable rows are not the pinned targets' peers
  return r;
}

}  // namespace

TEST(BenchTargets, PinnedAheadOfBothPeersResolved) {
  const auto checks = check_targets(pinned_case(256 * MiB, 5.0, 5.5, 6.0));
  const auto hand = measured(checks, names::ahead_of_hand_written);
  ASSERT_EQ(hand.size(), 1u);
  EXPECT_EQ(hand[0].verdict, Verdict::met);
  EXPECT_EQ(hand[0].resolved, true);
  EXPECT_NE(hand[0].what.find("triple buffer"), std::string::npos);  // the fastest peer, not the synchronous one
  const auto torch = measured(checks, names::ahead_of_pytorch);
  ASSERT_EQ(torch.size(), 1u);
  EXPECT_EQ(torch[0].verdict, Verdict::met);
  EXPECT_NE(torch[0].what.find("PyTorch, pinned"), std::string::npos);
}

TEST(BenchTargets, ASlowerMedianMissesAndSaysWhenTheNoiseHidesIt) {
  const auto level = measured(check_targets(pinned_case(256 * MiB, 5.02, 5.0, 6.0)), names::ahead_of_hand_written);
  ASSERT_EQ(level.size(), 1u);
  EXPECT_EQ(level[0].verdict, Verdict::missed);
  EXPECT_EQ(level[0].resolved, false);
  const auto clear = measured(check_targets(pinned_case(256 * MiB, 6.0, 5.0, 7.0)), names::ahead_of_hand_written);
  EXPECT_EQ(clear[0].verdict, Verdict::missed);
  EXPECT_EQ(clear[0].resolved, true);
}

TEST(BenchTargets, AnUnverifiedRowNeverMeetsATarget) {
  BenchResult r = pinned_case(256 * MiB, 5.0, 5.5, 6.0);
  r.rows[2].verified = false;
  EXPECT_EQ(measured(check_targets(r), names::ahead_of_hand_written)[0].verdict, Verdict::missed);
  EXPECT_EQ(measured(check_targets(r), names::near_bound)[0].verdict, Verdict::missed);
}

TEST(BenchTargets, TheBoundFloorDependsOnTheSize) {
  auto near = [](std::size_t bytes, double efficiency) {
    return measured(check_targets(pinned_case(bytes, 5, 6, 7, efficiency)), names::near_bound);
  };
  EXPECT_TRUE(near(16 * MiB, 0.5).empty());  // no floor below 64 MiB
  EXPECT_EQ(near(64 * MiB, 0.91)[0].verdict, Verdict::met);
  EXPECT_EQ(near(256 * MiB, 0.89)[0].verdict, Verdict::missed);
  EXPECT_EQ(near(1024 * MiB, 0.96)[0].verdict, Verdict::missed);
  EXPECT_EQ(near(4096 * MiB, 0.975)[0].verdict, Verdict::met);
}

TEST(BenchTargets, SizesAndRowsTheCallLeftOutAreNotMeasuredNotMet) {
  BenchResult r = pinned_case(256 * MiB, 5.0, 5.5, 6.0);
  r.rows.pop_back();
  r.rows.pop_back();  // no PyTorch rows
  const auto checks = check_targets(r);
  const auto torch = of_target(checks, names::ahead_of_pytorch);
  ASSERT_FALSE(torch.empty());
  for (const auto& c : torch) EXPECT_EQ(c.verdict, Verdict::not_measured);
  // 4, 16, 64 MiB, 1 and 4 GiB were not in this call: one check names them.
  const auto hand = of_target(checks, names::ahead_of_hand_written);
  ASSERT_EQ(hand.size(), 2u);
  EXPECT_EQ(hand[1].verdict, Verdict::not_measured);
  EXPECT_EQ(hand[1].cases, 5u);
  EXPECT_EQ(hand[1].what, "4 MiB, 16 MiB, 64 MiB, 1 GiB, 4 GiB: not in this call's sizes");
  EXPECT_EQ(of_target(checks, names::file_reduction)[0].verdict, Verdict::not_measured);
  EXPECT_EQ(of_target(checks, names::staged_near_bound)[0].verdict, Verdict::not_measured);
  for (const auto& s : summarize_targets(checks)) {
    if (s.target == names::ahead_of_pytorch) {
      EXPECT_EQ(s.verdict(), Verdict::not_measured);
    }
  }
}

TEST(BenchTargets, TwoPipelinesOfOneSettingMustReadAlike) {
  BenchResult r = pinned_case(256 * MiB, 5.0, 5.5, 6.0);
  EXPECT_EQ(of_target(check_targets(r), names::same_engine)[0].verdict, Verdict::met);
  r.rows[3] = row("copy", 256 * MiB, row_names::pinned_again, RowKind::sluice, runs(5.5));
  EXPECT_EQ(of_target(check_targets(r), names::same_engine)[0].verdict, Verdict::missed);
}

TEST(BenchTargets, ReplayedRowsThatAreNotAvailableAreNotMeasured) {
  BenchResult r = pinned_case(4 * MiB, 0.2, 0.21, 0.25);
  r.rows.push_back(workloads::unavailable_row("copy", 4 * MiB, row_names::replayed, RowKind::sluice_replayed, "pinned",
                                              "the pipeline cannot replay runs yet"));
  const auto checks = check_targets(r);
  const auto faster = of_target(checks, names::replay_faster);
  ASSERT_EQ(faster.size(), 1u);
  EXPECT_EQ(faster[0].verdict, Verdict::not_measured);
  EXPECT_NE(faster[0].what.find("cannot replay"), std::string::npos);
  EXPECT_EQ(of_target(checks, names::replay_small_copy)[0].verdict, Verdict::not_measured);
}

TEST(BenchTargets, ReplayedRowsWhenMeasured) {
  BenchResult r = pinned_case(4 * MiB, 0.2, 0.21, 0.25);
  r.rows.push_back(row("copy", 4 * MiB, row_names::replayed, RowKind::sluice_replayed, runs(0.15), 0.6));
  auto checks = check_targets(r);
  EXPECT_EQ(of_target(checks, names::replay_faster)[0].verdict, Verdict::met);
  EXPECT_EQ(of_target(checks, names::replay_small_copy)[0].verdict, Verdict::met);
  r.rows.back() = row("copy", 4 * MiB, row_names::replayed, RowKind::sluice_replayed, runs(0.2), 0.5);
  checks = check_targets(r);
  EXPECT_EQ(of_target(checks, names::replay_faster)[0].verdict, Verdict::missed);  // level is not faster
  EXPECT_EQ(of_target(checks, names::replay_small_copy)[0].verdict, Verdict::missed);
}

TEST(BenchTargets, StagedRowsAgainstTheBoundOrTheHostAlone) {
  auto staged_case = [](double efficiency, std::optional<double> host_alone_ms) {
    BenchResult r = pinned_case(256 * MiB, 5.0, 5.5, 6.0);
    r.rows.push_back(row("copy", 256 * MiB, row_names::staged, RowKind::sluice, runs(10.0), efficiency, "pageable"));
    if (host_alone_ms)
      r.cases[0].host_alone = row("copy", 256 * MiB, "host alone", RowKind::hand_written, runs(*host_alone_ms), 0, "pageable");
    return of_target(check_targets(r), names::staged_near_bound);
  };
  EXPECT_EQ(staged_case(0.91, std::nullopt)[0].verdict, Verdict::met);
  EXPECT_EQ(staged_case(0.80, std::nullopt)[0].verdict, Verdict::missed);
  // Bound 8 ms; the host alone takes 6 ms, so 0.90 of the bound was within reach: missed.
  EXPECT_EQ(staged_case(0.80, 6.0)[0].verdict, Verdict::missed);
  // The host alone takes 9.6 ms, beyond 0.90 of the 8 ms bound: judged against it, 0.96 of it.
  const auto out_of_reach = staged_case(0.80, 9.6);
  EXPECT_EQ(out_of_reach[0].verdict, Verdict::met);
  EXPECT_NE(out_of_reach[0].what.find("out of the host's reach"), std::string::npos);
  EXPECT_EQ(staged_case(0.80, 9.0)[0].verdict, Verdict::missed);  // 9.0 > 8 / 0.9 but the row at 0.90 of it
}

TEST(BenchTargets, FileReductionAgainstItsH2DTerm) {
  BenchResult r;
  BenchCase c = case_of("file sum", 2048 * MiB);
  c.file = true;
  c.bound.pinned.terms = {{"h2d", 38.0}, {"storage read", 30.0}};
  r.cases.push_back(c);
  r.rows.push_back(row("file sum", 2048 * MiB, row_names::file_reduction_run_stream, RowKind::sluice, runs(44.0), 0.86, "file"));
  EXPECT_EQ(of_target(check_targets(r), names::file_reduction)[0].verdict, Verdict::met);  // 38 / 44 = 0.864
  r.rows.back() = row("file sum", 2048 * MiB, row_names::file_reduction_run_stream, RowKind::sluice, runs(46.0), 0.8, "file");
  EXPECT_EQ(of_target(check_targets(r), names::file_reduction)[0].verdict, Verdict::missed);
}

TEST(BenchTargets, ARowAboveItsBoundSaysTheBoundIsWrong) {
  BenchResult r = pinned_case(256 * MiB, 5.0, 5.5, 6.0, 1.05);
  const auto holds = of_target(check_targets(r), names::bound_holds);
  ASSERT_FALSE(holds.empty());
  EXPECT_EQ(holds[0].verdict, Verdict::missed);
  EXPECT_EQ(of_target(check_targets(pinned_case(256 * MiB, 5.0, 5.5, 6.0)), names::bound_holds)[0].verdict, Verdict::met);
}

TEST(BenchTargets, SummaryCountsAndTheTextEndsWithIt) {
  const auto checks = check_targets(pinned_case(256 * MiB, 5.02, 5.0, 6.0));
  const auto summary = summarize_targets(checks);
  const auto hand = std::find_if(summary.begin(), summary.end(),
                                 [](const TargetSummary& s) { return s.target == names::ahead_of_hand_written; });
  ASSERT_NE(hand, summary.end());
  EXPECT_EQ(hand->missed, 1);
  EXPECT_EQ(hand->missed_within_noise, 1);
  EXPECT_EQ(hand->not_measured, 5);
  EXPECT_EQ(hand->verdict(), Verdict::missed);
  const std::string text = targets_text(checks);
  EXPECT_NE(text.find("[MISSED, level]"), std::string::npos);
  EXPECT_NE(text.find("Summary:"), std::string::npos);
  EXPECT_NE(text.find("[MISSED] " + std::string(names::ahead_of_hand_written) + ": 0 met, 1 missed (1 within noise), 5 not measured (above)"),
            std::string::npos);
  const auto json = targets_json(checks);
  EXPECT_EQ(json.at("summary").size(), summary.size());
  EXPECT_EQ(json.at("checks").size(), checks.size());
}

TEST(TuneTargets, DefaultsGapModelAndTwoPipelines) {
  TuneCase c;
  c.workload = "copy";
  c.bytes = 256 * MiB;
  c.defaults = row("copy", c.bytes, "defaults", RowKind::sluice, runs(5.10));
  c.defaults_again = row("copy", c.bytes, "defaults, again", RowKind::sluice, runs(5.12));
  TunePoint best{{}, "8 MiB chunks, depth 6", row("copy", c.bytes, "8 MiB", RowKind::sluice, runs(5.0)), 5.2};
  TunePoint off{{}, "1 MiB chunks, depth 2", row("copy", c.bytes, "1 MiB", RowKind::sluice, runs(8.0)), 6.8};
  c.sweep = {best, off};
  c.finalists = {best};
  auto checks = check_targets(std::vector<TuneCase>{c});
  EXPECT_EQ(of_target(checks, names::tune_defaults)[0].verdict, Verdict::met);  // +2%
  EXPECT_EQ(of_target(checks, names::tune_model)[0].verdict, Verdict::missed);   // 6.8 against 8.0: -15%
  EXPECT_EQ(of_target(checks, names::tune_same_engine)[0].verdict, Verdict::met);
  c.defaults = row("copy", c.bytes, "defaults", RowKind::sluice, runs(5.25));
  c.sweep[1].model_ms = 7.6;
  checks = check_targets(std::vector<TuneCase>{c});
  EXPECT_EQ(of_target(checks, names::tune_defaults)[0].verdict, Verdict::missed);  // +5%
  EXPECT_EQ(of_target(checks, names::tune_model)[0].verdict, Verdict::met);
  c.bytes = 4096 * MiB;  // the defaults' target stops at 1 GiB
  EXPECT_TRUE(of_target(check_targets(std::vector<TuneCase>{c}), names::tune_defaults).empty());
}

TEST(BenchTargets, ARowReadBackWithItsMedianAloneIsComparedButResolvesNothing) {
  BenchResult r = pinned_case(256 * MiB, 5.0, 5.5, 6.0);
  r.rows[4].samples.clear();  // the PyTorch row, as an older peer script reports it
  const auto torch = measured(check_targets(r), names::ahead_of_pytorch);
  ASSERT_EQ(torch.size(), 1u);
  EXPECT_EQ(torch[0].verdict, Verdict::met);
  EXPECT_FALSE(torch[0].resolved.has_value());
  EXPECT_NE(torch[0].what.find("too few runs"), std::string::npos);
}
