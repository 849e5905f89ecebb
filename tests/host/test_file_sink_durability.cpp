// The file sink's durability, seen in the order of its file calls: a run's
// output survives a crash only if its new file is written, then synced, then
// renamed over the target, and the directory synced after the rename. A killed
// process cannot show a missing sync (the page cache outlives it); the
// recorded calls can.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "file_run.hpp"
#include "injected_faults.hpp"
#include "scratch_dir.hpp"
#include "sluice/pipeline/file_io.hpp"

using sluice::FileOptions;
using namespace sluice::test;

namespace {

bool is_change(FileCall call) {
  return call == FileCall::pwrite || call == FileCall::ftruncate || call == FileCall::fallocate;
}

// The calls one a line, for a failure's message.
std::string text_of(const std::vector<RecordedCall>& calls) {
  std::string text;
  for (std::size_t i = 0; i < calls.size(); ++i)
    text += std::to_string(i) + ": " + to_string(calls[i].call) + " " + calls[i].path +
            (calls[i].to.empty() ? "" : " -> " + calls[i].to) + " = " + std::to_string(calls[i].result) + "\n";
  return text;
}

// Empty when `calls` replaced `target` durably: every write, size change and reservation of
// the new file before its sync, that sync before the rename over `target`, and a sync of
// `dir` after the rename. Else the first step out of order.
std::string replacement_problem(const std::vector<RecordedCall>& calls, const std::string& target, const std::string& dir) {
  std::size_t rename = calls.size();
  for (std::size_t i = 0; i < calls.size() && rename == calls.size(); ++i)
    if (calls[i].call == FileCall::renameat && calls[i].to == target && calls[i].result == 0) rename = i;
  if (rename == calls.size()) return "nothing was renamed over " + target;
  const std::string& new_file = calls[rename].path;
  std::size_t sync = rename, writes = 0;
  for (std::size_t i = 0; i < rename; ++i)
    if (calls[i].path == new_file && calls[i].call == FileCall::fsync && calls[i].result == 0) sync = i;
  if (sync == rename) return "the new file " + new_file + " was not synced before its rename";
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].path != new_file || !is_change(calls[i].call)) continue;
    if (i > sync) return "call " + std::to_string(i) + " (" + to_string(calls[i].call) + ") came after the new file's sync";
    writes += calls[i].call == FileCall::pwrite;
  }
  if (writes == 0) return "the new file " + new_file + " was never written";
  for (std::size_t i = rename + 1; i < calls.size(); ++i)
    if (calls[i].path == dir && calls[i].call == FileCall::fsync && calls[i].result == 0) return "";
  return "the directory " + dir + " was not synced after the rename";
}

}  // namespace

TEST(FileSinkDurability, ARunWritesSyncsRenamesThenSyncsTheDirectory) {
  ScratchDir dir;
  const auto input = dir / "in.bin";
  const auto items = pattern(10'000, 3);
  write_items(input, items);
  // Over an earlier output and over none; with a header; through O_DIRECT where the file system takes it.
  for (const bool earlier : {true, false})
    for (const FileOptions& options : {FileOptions{}, FileOptions{.offset = 16}, FileOptions{.direct = true}}) {
      const auto target = dir / "out.bin";
      std::filesystem::remove(target);
      if (earlier) write_items(target, pattern(10, 1));
      const RecordedCalls calls(dir.path());
      run_file_to_file(FileRun(input, target, 3000, options));
      const auto recorded = calls.calls();
      EXPECT_EQ(replacement_problem(recorded, calls.dir() + "/out.bin", calls.dir()), "")
          << "earlier output: " << earlier << ", offset " << options.offset << ", direct " << options.direct << "\n"
          << text_of(recorded);
    }
}

TEST(FileSinkDurability, InPlaceTheTargetIsSyncedAfterItsLastWrite) {
  ScratchDir dir;
  const auto input = dir / "in.bin";
  write_items(input, pattern(10'000, 3));
  FileOptions options;
  options.in_place = true;
  const RecordedCalls calls(dir.path());
  run_file_to_file(FileRun(input, dir / "out.bin", 3000, options));
  const auto recorded = calls.calls();
  const std::string target = calls.dir() + "/out.bin";
  std::size_t last_change = recorded.size(), sync = recorded.size();
  for (std::size_t i = 0; i < recorded.size(); ++i) {
    if (recorded[i].path != target) continue;
    if (is_change(recorded[i].call)) last_change = i;
    if (recorded[i].call == FileCall::fsync && recorded[i].result == 0) sync = i;
  }
  ASSERT_LT(last_change, recorded.size()) << "the target was never written\n" << text_of(recorded);
  EXPECT_LT(sync, recorded.size()) << "the target was never synced\n" << text_of(recorded);
  EXPECT_GT(sync, last_change) << "the target changed after its last sync\n" << text_of(recorded);
}

TEST(FileSinkDurability, TheOrderCheckCatchesEachMissingStep) {
  // The check itself, on sequences that each leave one step out or put it in the wrong place.
  const std::string dir = "/d", target = "/d/out", tmp = "/d/out.sluice-partial-x";
  const RecordedCall write{FileCall::pwrite, tmp, "", 4}, sync{FileCall::fsync, tmp, "", 0},
      rename{FileCall::renameat, tmp, target, 0}, dir_sync{FileCall::fsync, dir, "", 0};
  EXPECT_EQ(replacement_problem({write, sync, rename, dir_sync}, target, dir), "");
  EXPECT_NE(replacement_problem({write, rename, dir_sync}, target, dir), "");
  EXPECT_NE(replacement_problem({write, sync, rename}, target, dir), "");
  EXPECT_NE(replacement_problem({write, sync, dir_sync, rename}, target, dir), "");
  EXPECT_NE(replacement_problem({sync, write, rename, dir_sync}, target, dir), "");
  EXPECT_NE(replacement_problem({write, sync, dir_sync}, target, dir), "");
}
