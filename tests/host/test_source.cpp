// Producers and consumers: the typed wrappers around a callable, and what a
// consumer hears about the end of its run.
#include "sluice/pipeline/source.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

using sluice::ItemRange;

TEST(Producer, FillsTheItemsOfTheRangeAskedFor) {
  const auto source = sluice::produce<int>(100, [](ItemRange r, std::span<int> items) {
    std::iota(items.begin(), items.end(), static_cast<int>(r.begin));
  });
  std::vector<int> slot(10);
  source.source->read({40, 50}, std::as_writable_bytes(std::span(slot)));
  EXPECT_EQ(slot.front(), 40);
  EXPECT_EQ(slot.back(), 49);
  EXPECT_EQ(source.source->item_bytes(), sizeof(int));
}

TEST(Consumer, HearsWhetherItsRunCommittedOrWasAbandoned) {
  std::vector<int> got;
  int commits = 0;
  std::vector<std::size_t> abandoned;
  const auto sink = sluice::consume<int>(
      100, [&](ItemRange, std::span<const int> items) { got.insert(got.end(), items.begin(), items.end()); },
      {.commit = [&] { ++commits; }, .abandon = [&](std::size_t items_done) { abandoned.push_back(items_done); }});
  const std::vector<int> items(100, 7);
  sink.sink->begin_run();
  sink.sink->write({0, 100}, std::as_bytes(std::span(items)));
  sink.sink->commit();
  EXPECT_EQ(commits, 1);
  EXPECT_TRUE(abandoned.empty());
  sink.sink->begin_run();
  sink.sink->write({0, 40}, std::as_bytes(std::span(items).first(40)));
  sink.sink->abandon(40);
  EXPECT_EQ(commits, 1);
  EXPECT_EQ(abandoned, std::vector<std::size_t>{40});
  EXPECT_EQ(got.size(), 140u);
}

TEST(Consumer, AnAbandonThatThrowsIsReportedNotThrown) {
  const auto sink = sluice::consume<int>(
      10, [](ItemRange, std::span<const int>) {}, {.abandon = [](std::size_t) { throw std::runtime_error("cannot undo"); }},
      "undoer");
  ::testing::internal::CaptureStderr();
  sink.sink->abandon(3);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("undoer: abandoning a failed run threw: cannot undo"), std::string::npos) << said;
  // Without callbacks, commit and abandon do nothing.
  const auto plain = sluice::consume<int>(10, [](ItemRange, std::span<const int>) {});
  plain.sink->commit();
  plain.sink->abandon(0);
}
