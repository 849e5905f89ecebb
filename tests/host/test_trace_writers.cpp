#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "sluice/trace/trace_chrome.hpp"
#include "sluice/trace/trace_svg.hpp"
#include "sluice/trace/trace_terminal.hpp"

using sluice::Lane;
using sluice::StageInterval;
using sluice::Trace;

namespace {
Trace staircase() {
  Trace t;
  t.title = "staircase, 2 streams <\"fast\" & 'loud'>";
  t.wall_ms = 10;
  t.bound_ms = 8;
  for (std::size_t s = 0; s < 2; ++s) {
    const double o = 2.0 * static_cast<double>(s);
    t.intervals.push_back({Lane::h2d, s, o, o + 2, 1000, static_cast<int>(s)});
    t.intervals.push_back({Lane::compute, s, o + 2, o + 5, 0, static_cast<int>(s)});
    t.intervals.push_back({Lane::d2h, s, o + 5, o + 7, 1000, static_cast<int>(s)});
  }
  return t;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}
}  // namespace

TEST(ChromeTrace, HasTheFormatsDocumentedFields) {
  const Trace traces[] = {staircase()};
  const auto j = nlohmann::json::parse(sluice::chrome_trace_json(traces));
  ASSERT_TRUE(j.contains("traceEvents"));
  EXPECT_EQ(j["displayTimeUnit"], "ms");
  std::set<int> named_threads, used_threads;
  std::size_t complete = 0, instants = 0;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("tid") && e.contains("name"));
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "thread_name") named_threads.insert(e["tid"].get<int>());
    if (ph == "X") {
      ++complete;
      EXPECT_GE(e["ts"].get<double>(), 0.0);
      EXPECT_GT(e["dur"].get<double>(), 0.0);
      used_threads.insert(e["tid"].get<int>());
      EXPECT_TRUE(e["args"].contains("chunk"));
    }
    if (ph == "i") {
      ++instants;
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 8000.0);  // the bound, in microseconds
    }
  }
  EXPECT_EQ(complete, 6u);
  EXPECT_EQ(instants, 1u);
  EXPECT_EQ(named_threads.size(), 6u);  // 3 lanes x 2 streams
  for (int tid : used_threads) EXPECT_TRUE(named_threads.count(tid)) << "unnamed thread " << tid;
}

TEST(ChromeTrace, TitlesAreEscapedAndEmptyInputIsValid) {
  const Trace traces[] = {staircase()};
  const auto j = nlohmann::json::parse(sluice::chrome_trace_json(traces));
  EXPECT_EQ(j["traceEvents"][0]["args"]["name"], staircase().title);
  const auto empty = nlohmann::json::parse(sluice::chrome_trace_json({}));
  EXPECT_TRUE(empty["traceEvents"].empty());
}

TEST(SvgTimeline, OneBarPerIntervalAxisBoundAndLegend) {
  const Trace traces[] = {staircase()};
  const std::string svg = sluice::timeline_svg(traces);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "<title>chunk"), 6u);
  EXPECT_NE(svg.find("bound 8.00 ms"), std::string::npos);
  EXPECT_NE(svg.find(">0 ms<"), std::string::npos);
  EXPECT_NE(svg.find(">10 ms<"), std::string::npos);
  EXPECT_NE(svg.find("H2D copy 1"), std::string::npos);  // second stream's row
  EXPECT_NE(svg.find("efficiency 0.800"), std::string::npos);
  for (const char* legend : {">H2D copy<", ">compute<", ">D2H copy<"}) EXPECT_NE(svg.find(legend), std::string::npos);
}

TEST(SvgTimeline, EscapesText) {
  const Trace traces[] = {staircase()};
  const std::string svg = sluice::timeline_svg(traces);
  EXPECT_NE(svg.find("&lt;&quot;fast&quot; &amp; &apos;loud&apos;&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("<\"fast\""), std::string::npos);
}

TEST(SvgTimeline, SharedTimeScaleAndEmptyInput) {
  Trace shorter = staircase();
  shorter.title = "short";
  shorter.wall_ms = 5;
  for (auto& i : shorter.intervals) {
    i.start_ms /= 2;
    i.end_ms /= 2;
  }
  const Trace traces[] = {staircase(), shorter};
  const std::string svg = sluice::timeline_svg(traces);
  EXPECT_EQ(count(svg, "<title>chunk"), 12u);
  EXPECT_EQ(count(svg, ">10 ms<"), 2u);  // both axes run to the longer trace's end
  const std::string empty = sluice::timeline_svg({});
  EXPECT_EQ(empty.rfind("<svg", 0), 0u);
  EXPECT_NE(empty.find("</svg>"), std::string::npos);
}

TEST(TerminalTimeline, DrawsBusyCellsInOrder) {
  Trace t;
  t.title = "two stages";
  t.wall_ms = 8;
  t.intervals = {{Lane::h2d, 0, 0, 4, 0, 0}, {Lane::compute, 0, 4, 8, 0, 0}};
  const std::string text = sluice::terminal_timeline(t, 8);
  EXPECT_NE(text.find("|####    |"), std::string::npos) << text;
  EXPECT_NE(text.find("|    ####|"), std::string::npos) << text;
  EXPECT_NE(text.find("busiest"), std::string::npos);
  EXPECT_NE(sluice::terminal_timeline(Trace{}, 8).find("no intervals"), std::string::npos);
}
