// Lifetimes: submissions that outlive their pipeline, pipelines moved and
// destroyed mid-run, spans and callables that cannot change under a run.
#include <optional>
#include <string>
#include <vector>

#include "pipeline_test.hpp"

using sluice::Chunk;
using sluice::Pipeline;
using sluice::PipelineOptions;
using sluice::Submission;

namespace sluice::test {

namespace {
PipelineOptions small_chunks() {
  PipelineOptions o;
  o.chunk_items = 4096;
  return o;
}
// A pipeline whose computes each take 0.2 ms, so a run is still going when the test acts.
void slow_affine(Backend& b, Pipeline& p, const std::vector<float>& in, std::vector<float>& out) {
  const auto x = p.input(in);
  const auto y = p.output(out);
  p.compute([&b, x, y](const Chunk& c) { b.late_affine(c, 200, c[x].data(), c[y].data(), 2, 1); });
}
}  // namespace

TEST_P(PipelineTest, AnUnwaitedSubmissionFinishesItsRunWhenDestroyed) {
  const auto in = pattern(100'000);
  std::vector<float> out(in.size(), std::nanf(""));
  Pipeline p = pipeline(small_chunks());
  slow_affine(backend(), p, in, out);
  { Submission s = p.submit(); }
  EXPECT_TRUE(is_affine(in, out));
  std::fill(out.begin(), out.end(), std::nanf(""));
  p.run();  // and the pipeline is free again
  EXPECT_TRUE(is_affine(in, out));
}

TEST_P(PipelineTest, APipelineDestroyedWithALiveSubmissionLeavesItWorking) {
  const auto in = pattern(100'000);
  std::vector<float> out(in.size(), std::nanf(""));
  std::optional<Submission> s;
  {
    Pipeline p = pipeline(small_chunks());
    slow_affine(backend(), p, in, out);
    s.emplace(p.submit());
  }  // the pipeline goes; its run keeps what it runs on
  const auto report = s->wait();
  EXPECT_EQ(report.chunk_count, (in.size() + 4095) / 4096);
  EXPECT_TRUE(is_affine(in, out));
}

TEST_P(PipelineTest, APipelineMoveAssignedDuringARunLeavesTheRunWhole) {
  const auto in = pattern(100'000);
  std::vector<float> out(in.size(), std::nanf(""));
  Pipeline p = pipeline(small_chunks());
  slow_affine(backend(), p, in, out);
  Submission s = p.submit();
  p = pipeline(small_chunks());  // the old engine lives on in `s`
  s.wait();
  EXPECT_TRUE(is_affine(in, out));
  EXPECT_THROW(p.run(), std::invalid_argument);  // the new pipeline has no spans
}

TEST_P(PipelineTest, MoveAssigningASubmissionDoesNotSwallowTheEarlierFailure) {
  const auto in = pattern(20'000);
  std::vector<float> out(in.size()), out2(in.size(), std::nanf(""));
  Pipeline failing = pipeline(small_chunks()), fine = pipeline(small_chunks());
  const auto x = failing.input(in);
  const auto y = failing.output(out);
  failing.compute([x, y, b = &backend()](const Chunk& c) {
    if (c.index == 2) throw std::runtime_error("chunk 2 gave up");
    b->affine(c, c[x].data(), c[y].data(), 2, 1);
  });
  affine(fine, fine.input(in), fine.output(out2));
  Submission s = failing.submit();
  try {
    s = fine.submit();
    FAIL() << "the earlier run's failure was lost";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("the compute callable threw at chunk 2 of ", 0), 0u) << what;
    EXPECT_EQ(what.substr(what.size() - std::string(": chunk 2 gave up").size()), ": chunk 2 gave up") << what;
  }
  ASSERT_TRUE(s.valid());  // the new run was taken over all the same
  s.wait();
  EXPECT_TRUE(is_affine(in, out2));
}

TEST_P(PipelineTest, SpansAddedAfterARunAreRefusedNotIgnored) {
  const auto in = pattern(1000), in2 = pattern(1000);
  std::vector<float> out(1000), out2(1000, std::nanf(""));
  Pipeline p = pipeline();
  affine(p, p.input(in), p.output(out));
  p.run();
  try {
    p.input(in2);
    FAIL() << "a span added after a run was accepted";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("clear_spans"), std::string::npos) << e.what();
  }
  // Starting over: clear_spans forgets the spans and the callable that used them.
  p.clear_spans();
  EXPECT_THROW(p.run(), std::invalid_argument);
  affine(p, p.input(in2), p.output(out2));
  p.run();
  EXPECT_TRUE(is_affine(in2, out2));
}

TEST_P(PipelineTest, RebindStreamsOtherMemoryThroughTheSameCallable) {
  const auto a = pattern(5000), b = pattern(7000);
  std::vector<float> out_a(a.size(), std::nanf("")), out_b(b.size(), std::nanf(""));
  Pipeline p = pipeline(small_chunks());
  const auto x = p.input(a);
  const auto y = p.output(out_a);
  affine(p, x, y);
  p.run();
  EXPECT_TRUE(is_affine(a, out_a));
  p.rebind(x, b);
  p.rebind(y, out_b);
  p.run();
  EXPECT_TRUE(is_affine(b, out_b));
  Pipeline other = pipeline();
  EXPECT_THROW(other.rebind(x, b), std::logic_error);  // a handle of another pipeline
}

TEST_P(PipelineTest, NothingChangesUnderARun) {
  const auto in = pattern(100'000), in2 = pattern(10);
  std::vector<float> out(in.size());
  Pipeline p = pipeline(small_chunks());
  slow_affine(backend(), p, in, out);
  Submission s = p.submit();
  EXPECT_THROW(p.compute([](const Chunk&) {}), std::logic_error);
  EXPECT_THROW(p.on_chunk_done([](std::size_t, sluice::ItemRange) {}), std::logic_error);
  EXPECT_THROW(p.clear_spans(), std::logic_error);
  EXPECT_THROW(p.run(), std::logic_error);
  s.wait();
  EXPECT_TRUE(is_affine(in, out));
}

TEST_P(PipelineTest, AMovedFromPipelineSaysSo) {
  Pipeline p = pipeline();
  Pipeline q(std::move(p));
  EXPECT_THROW(p.run(), std::logic_error);  // NOLINT(bugprone-use-after-move): the point of the test
  EXPECT_THROW(p.options(), std::logic_error);
}

}  // namespace sluice::test
