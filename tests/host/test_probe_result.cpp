#include "probe_report.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

using sluice::Measurement;
using sluice::ProbeResult;

namespace {
Measurement m(std::string name, std::size_t bytes, double median_ms, std::size_t moved = 0) {
  Measurement r;
  r.name = std::move(name);
  r.bytes = bytes;
  r.moved = moved;
  r.ms.count = 3;
  r.ms.median = r.ms.min = r.ms.max = median_ms;
  return r;
}

ProbeResult sample() {
  ProbeResult r;
  r.device.name = "Test GPU";
  r.device.async_engine_count = 2;
  r.transfers.push_back(m("h2d pinned", 1 << 30, 1073741824.0 / 55e6));  // 55 GB/s
  r.transfers.push_back(m("both ways pinned", 1 << 30, 2 * 1073741824.0 / 96e6, std::size_t{2} << 30));
  r.transfers.push_back(m("h2d pinned", 64 << 10, 65536.0 / 10e6));
  r.fixed_costs.push_back(m("event record", 0, 0.002));
  r.notes.push_back("a note");
  return r;
}
}  // namespace

TEST(ProbeResult, BothWaysCountsBothDirections) {
  auto r = sample();
  EXPECT_NEAR(r.transfers[0].median_gbps(), 55.0, 1e-9);
  EXPECT_NEAR(r.transfers[1].median_gbps(), 96.0, 1e-9);
}

TEST(ProbeResult, TextPivotsSizesIntoRowsSmallestFirst) {
  const std::string text = sluice::tools::probe_text(sample());
  EXPECT_NE(text.find("Test GPU"), std::string::npos);
  const auto small = text.find("64 KiB");
  const auto large = text.find("1 GiB");
  ASSERT_NE(small, std::string::npos);
  ASSERT_NE(large, std::string::npos);
  EXPECT_LT(small, large);
  EXPECT_NE(text.find("55.0"), std::string::npos);
  EXPECT_NE(text.find("96.0"), std::string::npos);
  EXPECT_NE(text.find("2.00"), std::string::npos);  // 0.002 ms event record shown as 2.00 us
  EXPECT_NE(text.find("note: a note"), std::string::npos);
}

TEST(ProbeResult, JsonIsValidAndComplete) {
  auto j = nlohmann::json::parse(sluice::tools::probe_json(sample()));
  EXPECT_EQ(j["device"]["name"], "Test GPU");
  EXPECT_TRUE(j["device"]["pcie_link"].is_null());
  ASSERT_EQ(j["transfers"].size(), 3u);
  EXPECT_NEAR(j["transfers"][1]["median_gbps"].get<double>(), 96.0, 1e-9);
  EXPECT_EQ(j["transfers"][1]["moved_bytes"].get<std::size_t>(), std::size_t{2} << 30);
  EXPECT_FALSE(j["fixed_costs"][0].contains("median_gbps"));
  EXPECT_EQ(j["notes"][0], "a note");
}

TEST(ProbeResult, JsonReadsBackForTheModel) {
  const auto original = sample();
  const auto back = sluice::tools::probe_from_json(sluice::tools::probe_json(original));
  EXPECT_EQ(back.device.name, "Test GPU");
  ASSERT_EQ(back.transfers.size(), original.transfers.size());
  for (std::size_t i = 0; i < back.transfers.size(); ++i) {
    EXPECT_EQ(back.transfers[i].name, original.transfers[i].name);
    EXPECT_EQ(back.transfers[i].bytes, original.transfers[i].bytes);
    EXPECT_NEAR(back.transfers[i].median_gbps(), original.transfers[i].median_gbps(), 1e-9);
  }
  const auto link = sluice::tools::link_rates_of(back);
  EXPECT_NEAR(link.h2d_gbps, 55.0, 1e-9);  // the faster of the two sizes
  EXPECT_NEAR(link.both_gbps, 96.0, 1e-9);
  EXPECT_EQ(link.d2h_gbps, 0.0);  // not measured in the sample
}

TEST(ProbeResult, UnequalMixesBecomeLinkPoints) {
  auto r = sample();
  // 1 GiB in and 512 MiB out at 80 GB/s in all: 53.3 in, 26.7 out.
  r.transfers.push_back(m("both ways 2:1 pinned", 1 << 30, 1.5 * 1073741824.0 / 80e6, std::size_t{3} << 29));
  r.transfers.push_back(m("both ways 1:2 pinned", 1 << 30, 1.5 * 1073741824.0 / 78e6, std::size_t{3} << 29));
  const auto link = sluice::tools::link_rates_of(r);
  EXPECT_NEAR(link.h2d_heavy.h2d_gbps, 80.0 * 2 / 3, 1e-9);
  EXPECT_NEAR(link.h2d_heavy.d2h_gbps, 80.0 / 3, 1e-9);
  EXPECT_NEAR(link.d2h_heavy.h2d_gbps, 78.0 / 3, 1e-9);
  EXPECT_NEAR(link.d2h_heavy.d2h_gbps, 78.0 * 2 / 3, 1e-9);
}

TEST(ProbeResult, StagingBesideTheLinkBecomesTheSharedPoint) {
  auto r = sample();
  r.host_copies.push_back(m("stage both", 512 << 20, 2 * 536870912.0 / 88e6, std::size_t{1} << 30));
  r.host_copies.push_back(m("stage both beside the link", 512 << 20, 2 * 536870912.0 / 44e6, std::size_t{1} << 30));
  r.host_copies.push_back(m("link beside staging", 512 << 20, 2 * 536870912.0 / 90e6, std::size_t{1} << 30));
  const auto rates = sluice::tools::engine_rates_of(sluice::tools::probe_from_json(sluice::tools::probe_json(r)));
  EXPECT_NEAR(rates.stage_both_gbps, 88, 1e-9);
  EXPECT_NEAR(rates.staging_beside_link.stage_gbps, 44, 1e-9);
  EXPECT_NEAR(rates.staging_beside_link.link_gbps, 90, 1e-9);
}

TEST(ProbeResult, BadJsonSaysWhatIsWrong) {
  EXPECT_THROW(sluice::tools::probe_from_json("{not json"), std::invalid_argument);
  try {
    sluice::tools::probe_from_json(R"({"device": {"name": "x"}})");
    FAIL() << "a probe without transfers was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("transfers"), std::string::npos) << e.what();
  }
}

namespace {
Measurement copy_through(std::size_t bytes, std::size_t chunks, double gbps) {
  Measurement r = m("copy-through", bytes, 2.0 * static_cast<double>(bytes) / (gbps * 1e6), 2 * bytes);
  r.chunks = chunks;
  return r;
}

ProbeResult with_copy_through() {
  ProbeResult r = sample();  // both ways pinned at 1 GiB: 96 GB/s
  r.copy_through = {copy_through(1 << 30, 1, 55.0), copy_through(1 << 30, 16, 93.0), copy_through(1 << 30, 64, 90.0),
                    copy_through(64 << 10, 1, 12.0)};
  return r;
}
}  // namespace

TEST(ProbeResult, CopyThroughBestIsTheFastestChunkingOfEachSizeAgainstTheLinksBest) {
  ProbeResult r = with_copy_through();
  r.transfers.push_back(m("both ways pinned", 64 << 10, 2 * 65536.0 / 9e6, std::size_t{2} << 16));
  const auto best = sluice::tools::copy_through_best(r);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0].bytes, std::size_t{64} << 10);  // smallest first
  EXPECT_NEAR(best[0].of_link(), 12.0 / 96.0, 1e-9) << "against the fastest both ways of any size, not its own size's";
  EXPECT_EQ(best[1].chunks, 16u);
  EXPECT_NEAR(best[1].gbps, 93.0, 1e-9);
  EXPECT_NEAR(best[1].of_link(), 93.0 / 96.0, 1e-9);
  r.transfers.clear();
  EXPECT_EQ(sluice::tools::copy_through_best(r)[1].of_link(), 0.0) << "no link measured: no share claimed";
}

TEST(ProbeResult, CopyThroughShowsAsItsOwnTableAndReadsBack) {
  const ProbeResult r = with_copy_through();
  const std::string text = sluice::tools::probe_text(r);
  const auto table = text.find("Chunked copy-through");
  ASSERT_NE(table, std::string::npos);
  EXPECT_NE(text.find("16 chunks", table), std::string::npos);
  EXPECT_NE(text.find("0.969 (16 chunks)", table), std::string::npos);
  const ProbeResult back = sluice::tools::probe_from_json(sluice::tools::probe_json(r));
  ASSERT_EQ(back.copy_through.size(), r.copy_through.size());
  EXPECT_EQ(back.copy_through[1].chunks, 16u);
  EXPECT_NEAR(back.copy_through[1].median_gbps(), 93.0, 1e-9);
  // A probe written before copy-through existed still reads.
  auto old = nlohmann::json::parse(sluice::tools::probe_json(sample()));
  old.erase("copy_through");
  EXPECT_TRUE(sluice::tools::probe_from_json(old.dump()).copy_through.empty());
}
