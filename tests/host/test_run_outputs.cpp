// What a file output holds when a run ends after its sinks were given its
// chunks: a run whose sinks committed reports success, whatever it then
// fails to measure; a run stopped by its chunk-done callable keeps, in an
// in-place file, every chunk the file was given. On the host executor.
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "file_run.hpp"
#include "scratch_dir.hpp"
#include "sluice/pipeline/file_io.hpp"
#include "sluice/pipeline/host_executor.hpp"
#include "sluice/pipeline/pipeline.hpp"

using sluice::Chunk;
using sluice::FileOptions;
using sluice::HostExecutor;
using sluice::InjectedFault;
using sluice::ItemRange;
using sluice::Pipeline;
using sluice::PipelineOptions;
using sluice::RunReport;
using namespace sluice::test;

namespace {

constexpr std::size_t item_count = 350, chunk_items = 100;  // four chunks, the last one short

// y = 2x + 1, as run_file_to_file writes it (transformed()).
void compute_into(Pipeline& p, const std::vector<std::uint32_t>& in, const std::filesystem::path& target,
                  FileOptions options = {}) {
  const auto x = p.input(in);
  const auto y = p.output(sluice::to_file<std::uint32_t>(target, in.size(), options));
  p.compute([x, y](const Chunk& c) {
    for (std::size_t i = 0; i < c.size(); ++i) c[y][i] = c[x][i] * 2 + 1;
  });
}

PipelineOptions small_chunks() {
  PipelineOptions o;
  o.chunk_items = chunk_items;
  return o;
}

}  // namespace

TEST(RunOutputs, ABoundThatCannotBeMeasuredAfterTheFileIsReplacedIsSaidNotThrown) {
  ScratchDir dir;
  const auto target = dir / "out.bin";
  write_items(target, pattern(1000, 1));
  const auto in = pattern(item_count, 2);
  HostExecutor host;
  PipelineOptions o = small_chunks();
  o.report_bound = true;
  Pipeline p(o, host);
  compute_into(p, in, target);
  // The rates are measured after the sinks commit: the new file is in place by then.
  host.inject({InjectedFault::Kind::rates, {}});
  RunReport report;
  try {
    report = p.run();
  } catch (const std::exception& e) {
    FAIL() << "the run threw after its file was replaced: " << e.what()
           << "\nthe file now: " << (difference(target, as_bytes(transformed(in))).empty() ? "the new one" : "not the new one");
  }
  EXPECT_EQ(difference(target, as_bytes(transformed(in))), "");
  EXPECT_FALSE(report.bound.has_value());
  EXPECT_EQ(report.efficiency(), 0.0);
  const auto said = std::find_if(report.notes.begin(), report.notes.end(), [](const std::string& note) {
    return note.find("bound") != std::string::npos && note.find("could not be measured") != std::string::npos &&
           note.find("an injected failure measuring the engines' rates") != std::string::npos;
  });
  EXPECT_NE(said, report.notes.end()) << "no note says why the run has no bound";

  // The fault fired once: the next run measures (the host executor knows no rates) and says nothing of it.
  report = p.run();
  EXPECT_FALSE(report.bound.has_value());
  for (const std::string& note : report.notes) EXPECT_EQ(note.find("could not be measured"), std::string::npos) << note;
}

TEST(RunOutputs, AThrowingChunkDoneCallableLeavesAnInPlaceFileWithTheChunksItWasGiven) {
  ScratchDir dir;
  const auto target = dir / "out.bin";
  write_items(target, pattern(1000, 1));
  const auto in = pattern(item_count, 2);
  HostExecutor host;
  Pipeline p(small_chunks(), host);
  FileOptions in_place;
  in_place.in_place = true;
  compute_into(p, in, target, in_place);
  std::vector<std::size_t> told;
  p.on_chunk_done([&told](std::size_t index, ItemRange) {
    told.push_back(index);
    if (index == 1) throw std::out_of_range("consumer gave up at chunk 1");
  });
  EXPECT_ANY_THROW(p.run());
  // The callable was told of chunks 0 and 1, each after the file was given
  // it: both stay, and nothing after them.
  EXPECT_EQ(told, (std::vector<std::size_t>{0, 1}));
  const auto all = transformed(in);
  EXPECT_EQ(difference(target, as_bytes(std::vector<std::uint32_t>(all.begin(), all.begin() + 200))), "");
}
