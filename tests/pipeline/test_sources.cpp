// Sources and sinks: files and producers straight into and out of the
// pinned slots, in order, and failures that stop the run cleanly.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include "pipeline_test.hpp"
#include "sluice/pipeline/file_io.hpp"
#include "sluice/pipeline/source.hpp"

using sluice::Chunk;
using sluice::ItemRange;
using sluice::Pipeline;
using sluice::PipelineOptions;

namespace sluice::test {

void SourceTest::SetUp() {
  PipelineTest::SetUp();
  if (IsSkipped()) return;
  std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(test.begin(), test.end(), '/', '-');
  dir_ = std::filesystem::temp_directory_path() / ("sluice-sources-" + std::to_string(getpid()) + "-" + test);
  std::filesystem::create_directories(dir_);
}

void SourceTest::TearDown() {
  PipelineTest::TearDown();
  if (!dir_.empty()) std::filesystem::remove_all(dir_);
}

std::filesystem::path SourceTest::write_floats(const std::string& name, const std::vector<float>& v,
                                               std::size_t header) {
  const auto path = dir_ / name;
  std::ofstream out(path, std::ios::binary);
  const std::string pad(header, 'h');
  out.write(pad.data(), static_cast<std::streamsize>(pad.size()));
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return path;
}

std::vector<float> SourceTest::read_floats(const std::filesystem::path& path) {
  std::vector<float> v(std::filesystem::file_size(path) / sizeof(float));
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

std::vector<std::string> SourceTest::left_behind(const std::vector<std::string>& expected) {
  std::vector<std::string> extra;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    if (std::find(expected.begin(), expected.end(), name) == expected.end()) extra.push_back(name);
  }
  return extra;
}

namespace {

// A sink whose begin_run or commit fails, and that remembers how its run ended.
class FailingSink final : public sluice::Sink {
 public:
  enum class FailsAt { begin_run, commit };
  FailingSink(std::size_t items, FailsAt at) : items_(items), at_(at) {}
  std::size_t item_count() const override { return items_; }
  std::size_t item_bytes() const override { return sizeof(float); }
  std::string name() const override { return "failing sink"; }
  void begin_run() override {
    if (at_ == FailsAt::begin_run) throw sluice::IoError("/no/disk/out.f32", 0, "the disk went away");
  }
  void write(ItemRange, std::span<const std::byte>) override {}
  void commit() override {
    if (at_ == FailsAt::commit) throw sluice::IoError("/no/disk/out.f32", 0, "the disk went away");
  }
  void abandon(std::size_t items_done) noexcept override { abandoned = items_done; }
  std::optional<std::size_t> abandoned;

 private:
  std::size_t items_;
  FailsAt at_;
};

// Truncates its file when asked for chunk `at`: a file that shrinks under a run.
class ShrinkingFile final : public sluice::Source {
 public:
  ShrinkingFile(const std::filesystem::path& path, std::size_t at, std::size_t keep_bytes)
      : file_(path, sizeof(float)), path_(path), at_(at), keep_(keep_bytes) {}
  std::size_t item_count() const override { return file_.item_count(); }
  std::size_t item_bytes() const override { return sizeof(float); }
  std::string name() const override { return file_.name(); }
  bool splittable() const override { return false; }
  void read(ItemRange range, std::span<std::byte> pinned) override {
    if (range.begin >= at_ && !shrunk_.exchange(true)) std::filesystem::resize_file(path_, keep_);
    file_.read(range, pinned);
  }

 private:
  sluice::FileSource file_;
  std::filesystem::path path_;
  std::size_t at_, keep_;
  std::atomic<bool> shrunk_{false};
};

}  // namespace

TEST_P(SourceTest, FileToFileReproducesTheCpuTransformByteForByte) {
  for (std::size_t items : {std::size_t{1}, std::size_t{1000}, std::size_t{1'234'567}}) {
    const auto in = pattern(items);
    const auto in_path = write_floats("in.f32", in, 64);
    const auto out_path = dir_ / "out.f32";
    std::filesystem::remove(out_path);
    sluice::FileOptions header;
    header.offset = 64;
    PipelineOptions o;
    o.chunk_items = 100'000;
    o.first_chunk_items = 3000;
    Pipeline p = pipeline(o);
    const auto x = p.input(sluice::from_file<float>(in_path, header));
    const auto y = p.output(sluice::to_file<float>(out_path, items));
    affine(p, x, y);
    const auto report = p.run();
    EXPECT_EQ(report.volume.read_bytes, static_cast<double>(items * sizeof(float)));
    EXPECT_EQ(report.volume.written_bytes, static_cast<double>(items * sizeof(float)));
    std::vector<float> expected(items);
    for (std::size_t i = 0; i < items; ++i) expected[i] = in[i] * 2.0f + 1.0f;
    const auto got = read_floats(out_path);
    ASSERT_EQ(got.size(), items);
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), items * sizeof(float)), 0) << items << " items";
  }
}

TEST_P(SourceTest, ProducersAndConsumersAreCalledOnceAChunkInOrder) {
  const std::size_t n = 500'000;
  std::vector<std::size_t> produced, consumed;
  std::atomic<int> inside{0};
  bool overlapped = false;
  std::vector<float> results(n, std::nanf(""));
  PipelineOptions o;
  o.chunk_items = 20'000;
  Pipeline p = pipeline(o);
  const auto x = p.input(sluice::produce<float>(n, [&](ItemRange r, std::span<float> items) {
    overlapped |= ++inside > 1;
    produced.push_back(r.begin);
    for (std::size_t i = 0; i < items.size(); ++i) items[i] = static_cast<float>(r.begin + i);
    --inside;
  }));
  int commits = 0, abandons = 0;
  const auto y = p.output(sluice::consume<float>(
      n,
      [&](ItemRange r, std::span<const float> items) {
        consumed.push_back(r.begin);
        std::copy(items.begin(), items.end(), results.begin() + static_cast<std::ptrdiff_t>(r.begin));
      },
      {.commit = [&] { ++commits; }, .abandon = [&](std::size_t) { ++abandons; }}));
  affine(p, x, y);
  p.run();
  EXPECT_EQ(commits, 1);
  EXPECT_EQ(abandons, 0);
  EXPECT_FALSE(overlapped);
  ASSERT_EQ(produced.size(), 25u);
  ASSERT_EQ(consumed.size(), 25u);
  for (std::size_t c = 0; c < 25; ++c) {
    EXPECT_EQ(produced[c], c * 20'000);
    EXPECT_EQ(consumed[c], c * 20'000);
  }
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(results[i], static_cast<float>(i) * 2.0f + 1.0f) << i;
}

TEST_P(SourceTest, AProducerThatThrowsStopsTheRunAndLeavesTheOldOutput) {
  const std::size_t n = 100'000, chunk = 10'000;
  const auto out_path = dir_ / "partial.f32";
  const std::vector<float> old(1000, -3.0f);  // the output of an earlier run
  write_floats("partial.f32", old);
  PipelineOptions o;
  o.chunk_items = chunk;
  Pipeline p = pipeline(o);
  const auto x = p.input(sluice::produce<float>(
      n,
      [](ItemRange r, std::span<float> items) {
        if (r.begin == 6 * 10'000) throw std::runtime_error("decoder lost sync");
        for (std::size_t i = 0; i < items.size(); ++i) items[i] = static_cast<float>(r.begin + i);
      },
      "decoder"));
  const auto y = p.output(sluice::to_file<float>(out_path, n));
  affine(p, x, y);
  try {
    p.run();
    FAIL() << "the producer's failure was lost";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("chunk 6 of 10 (items 60000..70000), stage stage-in, span 0 (input, decoder)"), std::string::npos)
        << what;
    EXPECT_NE(what.find("decoder lost sync"), std::string::npos) << what;
    EXPECT_NE(what.find("chunks finished"), std::string::npos) << what;
    try {
      std::rethrow_if_nested(e);
      FAIL() << "the producer's own exception is not nested";
    } catch (const std::runtime_error& inner) {
      EXPECT_STREQ(inner.what(), "decoder lost sync");
    }
  }
  // The failed run's output replaced nothing: the earlier file is there as it was, alone.
  EXPECT_EQ(read_floats(out_path), old);
  EXPECT_EQ(left_behind({"partial.f32"}), std::vector<std::string>{});
}

TEST_P(SourceTest, AFileTruncatedUnderTheRunNamesFileOffsetAndChunk) {
  const std::size_t n = 200'000;
  const auto in = pattern(n);
  const auto path = write_floats("shrinks.f32", in);
  std::vector<float> out(n);
  PipelineOptions o;
  o.chunk_items = 20'000;
  Pipeline p = pipeline(o);
  const auto x = p.input(sluice::SourceOf<float>{std::make_shared<ShrinkingFile>(path, 100'000, 110'000 * 4)});
  const auto y = p.output(out);
  affine(p, x, y);
  try {
    p.run();
    FAIL() << "a short read went unnoticed";
  } catch (const sluice::IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("chunk 5 of 10 (items 100000..120000), stage stage-in"), std::string::npos) << what;
    EXPECT_NE(what.find("shrinks.f32"), std::string::npos) << what;
    EXPECT_NE(what.find("ended at offset 440000"), std::string::npos) << what;
    EXPECT_EQ(e.offset(), 440'000u);
  }
}

TEST_P(SourceTest, AFileTruncatedBeforeTheRunIsRefusedBeforeWork) {
  const auto in = pattern(10'000);
  const auto path = write_floats("short.f32", in);
  std::vector<float> out(in.size());
  Pipeline p = pipeline();
  const auto x = p.input(sluice::from_file<float>(path));
  const auto y = p.output(out);
  bool computed = false;
  p.compute([&computed, x, y](const Chunk&) { computed = true; });
  std::filesystem::resize_file(path, 100);
  EXPECT_THROW(p.run(), sluice::IoError);
  EXPECT_FALSE(computed);
}

TEST_P(SourceTest, ARunRefusedBeforeWorkLeavesAnExistingOutputAsItWas) {
  const std::size_t n = 1000;
  const std::vector<float> old(n, -3.0f);  // 4000 bytes from an earlier run
  const auto out_path = write_floats("out.f32", old);
  const auto in_path = write_floats("in.f32", pattern(n));
  {
    // The output span comes first; the input after it refuses (its file shrank).
    Pipeline p = pipeline();
    const auto y = p.output(sluice::to_file<float>(out_path, n));
    const auto x = p.input(sluice::from_file<float>(in_path));
    affine(p, x, y);
    std::filesystem::resize_file(in_path, 400);
    EXPECT_THROW(p.run(), sluice::IoError);
    EXPECT_EQ(read_floats(out_path), old);
  }
  {
    // A second sink refuses the run after the file sink began its own.
    write_floats("in.f32", pattern(n));
    Pipeline p = pipeline();
    const auto x = p.input(sluice::from_file<float>(in_path));
    const auto y = p.output(sluice::to_file<float>(out_path, n));
    const auto refusing = std::make_shared<FailingSink>(n, FailingSink::FailsAt::begin_run);
    p.output(sluice::SinkOf<float>{refusing});
    bool computed = false;
    p.compute([&computed, x, y](const Chunk&) { computed = true; });
    try {
      p.run();
      ADD_FAILURE() << "a sink's refusal was lost";
    } catch (const sluice::IoError& e) {
      EXPECT_NE(std::string(e.what()).find("the disk went away"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(computed);
    EXPECT_EQ(read_floats(out_path), old);
  }
  EXPECT_EQ(left_behind({"in.f32", "out.f32"}), std::vector<std::string>{});
}
TEST_P(SourceTest, ASinkThatCannotCommitFailsTheRunAndTheOtherOutputsStayAsTheyWere) {
  const std::size_t n = 100'000;
  const std::vector<float> old(10, -3.0f);
  const auto out_path = write_floats("out.f32", old);
  const auto in = pattern(n);
  PipelineOptions o;
  o.chunk_items = 10'000;
  Pipeline p = pipeline(o);
  const auto x = p.input(in);
  const auto failing = std::make_shared<FailingSink>(n, FailingSink::FailsAt::commit);
  const auto y = p.output(sluice::SinkOf<float>{failing});
  const auto z = p.output(sluice::to_file<float>(out_path, n));
  p.compute([b = &backend(), x, y, z](const Chunk& c) {  // both outputs written: nothing copied out unset
    b->affine(c, c[x].data(), c[y].data(), 2.0f, 1.0f);
    b->affine(c, c[x].data(), c[z].data(), 2.0f, 1.0f);
  });
  try {
    p.run();
    FAIL() << "a sink that could not commit went unreported";
  } catch (const sluice::IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stage commit, span 1 (output, failing sink)"), std::string::npos) << what;
    EXPECT_NE(what.find("/no/disk/out.f32: the disk went away"), std::string::npos) << what;
  }
  EXPECT_EQ(failing->abandoned, std::optional<std::size_t>(n));
  EXPECT_EQ(read_floats(out_path), old);  // the file sink after it was abandoned
  EXPECT_EQ(left_behind({"out.f32"}), std::vector<std::string>{});
}
TEST_P(SourceTest, APipelineFromAFileToItselfReadsWhatItsLastRunWrote) {
  // The sink renames its new file over x.f32; the next run must read that file, not the one
  // the source opened when it was made.
  const std::size_t n = 10'000;
  const auto path = write_floats("x.f32", std::vector<float>(n, 1.0f));
  PipelineOptions o;
  o.chunk_items = 4096;
  Pipeline p = pipeline(o);
  const auto x = p.input(sluice::from_file<float>(path));
  const auto y = p.output(sluice::to_file<float>(path, n));
  affine(p, x, y);
  for (float expected : {3.0f, 7.0f, 15.0f}) {
    p.run();
    EXPECT_EQ(read_floats(path), std::vector<float>(n, expected));
  }
  EXPECT_EQ(left_behind({"x.f32"}), std::vector<std::string>{});
}

TEST_P(SourceTest, AConsumerRunAgainReadsWhatItsProducerRewrote) {
  const std::size_t n = 5000;
  const auto path = dir_ / "between.f32";
  std::vector<float> made = pattern(n), got(n);
  Pipeline producer = pipeline();
  const auto a = producer.input(made);
  const auto b = producer.output(sluice::to_file<float>(path, n));
  producer.compute([bk = &backend(), a, b](const Chunk& c) { bk->affine(c, c[a].data(), c[b].data(), 1.0f, 0.0f); });
  producer.run();
  Pipeline consumer = pipeline();
  const auto x = consumer.input(sluice::from_file<float>(path));
  const auto y = consumer.output(got);
  affine(consumer, x, y);
  consumer.run();
  EXPECT_TRUE(is_affine(made, got));
  for (float& v : made) v += 100.0f;
  producer.run();
  consumer.run();
  EXPECT_TRUE(is_affine(made, got)) << "the consumer read the producer's first run again";
}

TEST_P(SourceTest, AShorterReplacementOfTheInputIsRefusedBeforeWork) {
  const std::size_t n = 1000;
  const auto path = write_floats("in.f32", pattern(n));
  std::vector<float> out(n);
  Pipeline p = pipeline();
  const auto x = p.input(sluice::from_file<float>(path));
  const auto y = p.output(out);
  bool computed = false;
  p.compute([&computed, x, y](const Chunk&) { computed = true; });
  write_floats("shorter.f32", pattern(n - 1));
  std::filesystem::rename(dir_ / "shorter.f32", path);
  try {
    p.run();
    FAIL() << "a run took a file of 999 items for 1000";
  } catch (const sluice::IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("in.f32: was replaced since the source was made, by a file of 3996 bytes"), std::string::npos)
        << what;
    EXPECT_NE(what.find("made for 1000 items (4000 bytes)"), std::string::npos) << what;
  }
  EXPECT_FALSE(computed);
}

TEST_P(SourceTest, SourceItemSizeMustMatchTheHandleType) {
  const auto path = write_floats("f.f32", pattern(100));
  Pipeline p = pipeline();
  EXPECT_THROW(p.input(sluice::SourceOf<double>{std::make_shared<sluice::FileSource>(path, sizeof(float))}),
               std::invalid_argument);
}

}  // namespace sluice::test
