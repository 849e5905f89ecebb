// The file sink's errors: every file call that can fail, failing, is an
// IoError naming the output and the cause, and the output is the file it was.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <ostream>

#include "file_run.hpp"
#include "injected_faults.hpp"
#include "scratch_dir.hpp"
#include "sluice/pipeline/file_io.hpp"

using sluice::FileOptions;
using sluice::FileSink;
using sluice::IoError;
using namespace sluice::test;

namespace {

FileOptions in_place() {
  FileOptions o;
  o.in_place = true;
  return o;
}

struct Fault {
  FileCall call;
  int error;
  const char* says;  // what the message says about the step that failed
};

void PrintTo(const Fault& fault, std::ostream* out) {
  *out << to_string(fault.call) << " failing with " << std::strerror(fault.error);
}

class FileSinkFault : public ::testing::TestWithParam<Fault> {};

}  // namespace

TEST_P(FileSinkFault, IsAnIoErrorNamingTheFileAndTheTargetSurvives) {
  const Fault fault = GetParam();
  ScratchDir dir;
  std::filesystem::create_directory(dir / "faulty");  // the fault reaches the output's files only
  const auto input = dir / "in.bin", target = dir / "faulty" / "out.bin";
  write_items(input, pattern(100'000, 7));
  const auto old = pattern(5000, 1);
  write_items(target, old);
  std::string what = "no IoError";
  {
    InjectedFault injected(fault.call, fault.error, dir / "faulty");
    try {
      run_file_to_file(FileRun(input, target, 10'000));
    } catch (const IoError& e) {
      what = e.what();
    }
    EXPECT_GT(injected.failed(), 0) << "the sink never made the call " << to_string(fault.call);
  }
  EXPECT_NE(what.find(target.string()), std::string::npos) << what;
  EXPECT_NE(what.find(fault.says), std::string::npos) << what;
  EXPECT_NE(what.find(std::strerror(fault.error)), std::string::npos) << what;
  EXPECT_EQ(difference(target, as_bytes(old)), "");
  EXPECT_EQ(names_in(dir / "faulty"), std::vector<std::string>{"out.bin"});
}

INSTANTIATE_TEST_SUITE_P(
    EveryCall, FileSinkFault,
    ::testing::Values(Fault{FileCall::fallocate, ENOSPC, "cannot reserve 400000 bytes"},
                      Fault{FileCall::ftruncate, EFBIG, "cannot size its new file"},
                      Fault{FileCall::pwrite, ENOSPC, "write of 40000 bytes at offset 0 into its new file out.bin.sluice-partial-"},
                      Fault{FileCall::fsync, EIO, "syncing its new file out.bin.sluice-partial-"},
                      Fault{FileCall::close, EIO, "closing its new file out.bin.sluice-partial-"},
                      Fault{FileCall::renameat, EIO, "cannot rename its new file"}),
    [](const auto& test) { return to_string(test.param.call); });

TEST(FileSinkErrors, AWriteThatFailsLaterInTheRunIsCaughtToo) {
  // The disk fills up at the run's fourth chunk (a file system that could not reserve the blocks).
  ScratchDir dir;
  const auto input = dir / "in.bin", target = dir / "out.bin";
  write_items(input, pattern(100'000, 7));
  const auto old = pattern(5000, 1);
  write_items(target, old);
  InjectedFault injected(FileCall::pwrite, ENOSPC, dir.path(), 3);
  try {
    run_file_to_file(FileRun(input, target, 10'000));
    FAIL() << "a full disk went unnoticed";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("write of 40000 bytes at offset 120000"), std::string::npos) << e.what();
    EXPECT_EQ(e.offset(), 120'000u);
  }
  EXPECT_EQ(difference(target, as_bytes(old)), "");
  EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{"in.bin", "out.bin"}));
}

TEST(FileSinkErrors, InPlaceErrorsReachTheCallerToo) {
  for (const Fault fault : {Fault{FileCall::fsync, EIO, "syncing the file failed"},
                            Fault{FileCall::close, EIO, "closing the file failed"},
                            Fault{FileCall::ftruncate, EIO, "cannot cut the file at 40000 bytes"}}) {
    ScratchDir dir;
    const auto input = dir / "in.bin", target = dir / "out.bin";
    write_items(input, pattern(10'000, 7));
    std::string what = "no IoError";
    {
      InjectedFault injected(fault.call, fault.error, dir.path());
      try {
        run_file_to_file(FileRun(input, target, 1000, in_place()));
      } catch (const IoError& e) {
        what = e.what();
      }
    }
    EXPECT_NE(what.find(target.string()), std::string::npos) << what;
    EXPECT_NE(what.find(fault.says), std::string::npos) << to_string(fault.call) << ": " << what;
  }
}

TEST(FileSinkErrors, ADirectorySyncThatFailsSaysTheFileIsAlreadyReplaced) {
  ScratchDir dir;
  const auto target = dir / "out.bin";
  write_items(target, pattern(10, 1));
  const auto next = pattern(10, 2);
  FileSink sink(target, 4, 10);
  sink.begin_run();
  sink.write({0, 10}, std::as_bytes(std::span(next)));
  // The file's own sync goes through; the directory's (the directory is not under itself: its parent's fault) fails.
  InjectedFault injected(FileCall::fsync, EIO, dir.path().parent_path(), 1);
  try {
    sink.commit();
    FAIL() << "a failed directory sync went unreported";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("is replaced by the new file, but syncing its directory failed"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(injected.failed(), 1);
  EXPECT_EQ(difference(target, as_bytes(next)), "");
}

