#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench_result.hpp"
#include "bench_rows.hpp"
#include "targets.hpp"
#include "tune_result.hpp"

using namespace sluice;
using namespace sluice::bench;
using namespace sluice::bench::testing;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

BenchResult small_result() {
  BenchResult r;
  r.repeats = 5;
  r.cases.push_back(case_of("copy", 4 * MiB));
  r.rows.push_back(row("copy", 4 * MiB, "triple buffer (best of sweep)", RowKind::hand_written, runs(0.200)));
  r.rows.back().overhead = RunReport::Overhead{0.012, 0.034, 5.5};
  r.rows.push_back(row("copy", 4 * MiB, row_names::pinned, RowKind::sluice, runs(0.190)));
  r.rows.push_back(workloads::unavailable_row("copy", 4 * MiB, row_names::replayed, RowKind::sluice_replayed, "pinned",
                                              "the pipeline cannot replay runs yet"));
  return r;
}

std::size_t line_with(const std::string& text, const std::string& what) { return text.find(what); }

}  // namespace

TEST(BenchReport, EveryRowShowsItsSpreadBesideItsMedian) {
  const std::string text = bench_text(small_result());
  EXPECT_NE(text.find("IQR"), std::string::npos);
  // runs(0.190): 0.1862 .. 0.1938, quartiles 0.1881 and 0.1919: 2.0% of the median.
  const auto at = line_with(text, "copy      4 MiB  sluice pinned ");
  ASSERT_NE(at, std::string::npos);
  const std::string line = text.substr(at, text.find('\n', at) - at);
  EXPECT_NE(line.find("0.190"), std::string::npos);
  EXPECT_NE(line.find("2.0%"), std::string::npos);
}

TEST(BenchReport, ARowThatCouldNotBeMeasuredSaysSoInsteadOfATime) {
  const std::string text = bench_text(small_result());
  const auto at = line_with(text, row_names::replayed);
  ASSERT_NE(at, std::string::npos);
  const std::string line = text.substr(at, text.find('\n', at) - at);
  EXPECT_NE(line.find("n/a"), std::string::npos);
  EXPECT_NE(line.find("not available: the pipeline cannot replay runs yet"), std::string::npos);
}

TEST(BenchReport, FixedCostsWhereMeasuredAndAWordWhereTheEngineGivesNone) {
  const std::string text = bench_text(small_result());
  EXPECT_NE(text.find("call to first copy ms"), std::string::npos);
  EXPECT_NE(text.find("0.012"), std::string::npos);
  EXPECT_NE(text.find("5.5"), std::string::npos);
  EXPECT_NE(text.find("Fixed costs of sluice's runs: not available"), std::string::npos);
  BenchResult r = small_result();
  r.rows[1].overhead = RunReport::Overhead{0.02, 0.03, 4.0};
  EXPECT_EQ(bench_text(r).find("Fixed costs of sluice's runs: not available"), std::string::npos);
}

TEST(BenchReport, TheTextEndsWithTheTargetsSummary) {
  const std::string text = bench_text(small_result());
  const auto summary = text.find("Summary:");
  ASSERT_NE(summary, std::string::npos);
  EXPECT_NE(text.find(target_names::ahead_of_hand_written, summary), std::string::npos);
  EXPECT_GT(summary, text.find("bound = max("));
}

TEST(BenchReport, JsonCarriesEveryRunTheSpreadTheCostsAndTheTargets) {
  const auto j = nlohmann::json::parse(bench_json(small_result()));
  const auto& rows = j.at("rows");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].at("samples_ms").size(), 5u);
  EXPECT_DOUBLE_EQ(rows[0].at("overhead").at("host_us_per_chunk").get<double>(), 5.5);
  EXPECT_TRUE(rows[1].at("overhead").is_null());
  EXPECT_EQ(rows[1].at("kind"), "sluice");
  EXPECT_LT(rows[1].at("q25_ms").get<double>(), rows[1].at("median_ms").get<double>());
  EXPECT_GT(rows[1].at("q75_ms").get<double>(), rows[1].at("median_ms").get<double>());
  EXPECT_NEAR(rows[1].at("spread").get<double>(), 0.02, 1e-9);
  EXPECT_EQ(rows[2].at("unavailable"), "the pipeline cannot replay runs yet");
  EXPECT_FALSE(rows[2].contains("median_ms"));
  const auto& summary = j.at("targets").at("summary");
  EXPECT_FALSE(summary.empty());
  for (const auto& s : summary) EXPECT_TRUE(s.contains("verdict"));
}

TEST(TuneReport, DefaultsTwiceWithTheirSpreadAndTheTargets) {
  TuneCase c;
  c.workload = "copy";
  c.bytes = 256 * MiB;
  c.defaults = row("copy", c.bytes, "defaults", RowKind::sluice, runs(5.10));
  c.defaults_again = row("copy", c.bytes, "defaults, again", RowKind::sluice, runs(5.12));
  sluice::PipelineOptions eight;
  eight.chunk_items = 2 * MiB;
  eight.depth = 6;
  TunePoint best{eight, "8 MiB chunks, depth 6", row("copy", c.bytes, "8 MiB", RowKind::sluice, runs(5.0)), 5.2};
  c.sweep = {best};
  c.model_input.items = c.bytes / 4;
  c.model_input.spans = sluice::array_spans(1, 1, 4, false);
  c.model_input.rates.h2d_gbps = 55;
  c.model_input.fixed.chunk_ms = 0.012;
  c.finalists = {best};
  const std::vector<TuneCase> cases{c};
  const std::string text = tune_text(cases);
  EXPECT_NE(text.find("5.100 (2.0%)"), std::string::npos);
  EXPECT_NE(text.find("5.120 (2.0%)"), std::string::npos);
  EXPECT_NE(text.find("+2.0%"), std::string::npos);
  EXPECT_NE(text.find("Summary:"), std::string::npos);
  const auto j = nlohmann::json::parse(tune_json(cases));
  EXPECT_EQ(j.at("cases")[0].at("defaults_again").at("samples_ms").size(), 5u);
  EXPECT_EQ(j.at("cases")[0].at("sweep")[0].at("setting"), "8 MiB chunks, depth 6");
  // What the model was given, so its predictions can be played again with no GPU.
  EXPECT_EQ(j.at("cases")[0].at("sweep")[0].at("options").at("chunk_items"), 2 * MiB);
  EXPECT_EQ(j.at("cases")[0].at("sweep")[0].at("options").at("depth"), 6u);
  const auto& input = j.at("cases")[0].at("model_input");
  EXPECT_EQ(input.at("items"), c.bytes / 4);
  EXPECT_EQ(input.at("spans").size(), 2u);
  EXPECT_EQ(input.at("spans")[1].at("role"), "output");
  EXPECT_DOUBLE_EQ(input.at("rates_gbps").at("h2d").get<double>(), 55.0);
  EXPECT_DOUBLE_EQ(input.at("fixed_ms").at("chunk").get<double>(), 0.012);
  EXPECT_FALSE(j.at("targets").at("checks").empty());
}
