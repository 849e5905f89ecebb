// Bad input refused before work, failures of the caller's callables that
// reach the caller naming the callable, the chunk and the stage, with the
// callable's own exception nested as it was, and a pipeline that stays
// usable after them. (A launch the runtime refuses and a faulting kernel are GPU-only:
// tests/gpu/test_pipeline_errors.cu.)
#include <sys/mman.h>

#include <atomic>
#include <exception>
#include <regex>
#include <typeinfo>
#include <string>
#include <vector>

#include "pipeline_test.hpp"

using sluice::Chunk;
using sluice::Pipeline;
using sluice::PipelineOptions;

namespace sluice::test {

namespace {
// Runs `p` and expects it refused before any work, with `text` in the message.
void expect_refused(Pipeline& p, const std::string& text) {
  try {
    p.run();
    ADD_FAILURE() << "accepted; expected a refusal naming '" << text << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

// The type and message of the exception nested in `e`, or what is wrong.
std::string nested_of(const std::exception& e) {
  try {
    std::rethrow_if_nested(e);
  } catch (const std::exception& inner) {
    return std::string(typeid(inner).name()) + ": " + inner.what();
  } catch (...) {
    return "something not derived from std::exception";
  }
  return "nothing nested";
}
}  // namespace

TEST_P(PipelineTest, BadConfigurationsAreRejectedBeforeWork) {
  std::vector<float> a(100), b(99), c(100);
  auto noop = [](const Chunk&) {};
  PipelineOptions zero_depth;
  zero_depth.depth = 0;
  EXPECT_THROW(pipeline(zero_depth), std::invalid_argument);
  PipelineOptions out_of_order;
  out_of_order.compute_streams = 2;  // kernels in chunk order, the default, need one
  EXPECT_THROW(pipeline(out_of_order), std::invalid_argument);
  {
    Pipeline p = pipeline();
    EXPECT_THROW(p.run(), std::invalid_argument);  // no spans
    p.input(a);
    p.output(c);
    EXPECT_THROW(p.run(), std::invalid_argument);  // no compute
  }
  {
    Pipeline p = pipeline();
    p.input(a);
    p.input(b);
    p.output(c);
    p.compute(noop);
    expect_refused(p, "span 1 (input) has 99 items");
  }
  {
    Pipeline p = pipeline();
    p.input(std::span<const float>(a));
    p.output(std::span<float>(a.data() + 10, 50));
    p.compute(noop);
    EXPECT_THROW(p.run(), std::invalid_argument);  // output overlaps input
  }
  {
    // Device memory: a slot of another pipeline's ring, which it keeps between runs.
    const float* slot = nullptr;
    Pipeline holder = pipeline();
    const auto x = holder.input(a);
    const auto y = holder.output(c);
    holder.compute([&slot, x, y, b = &backend()](const Chunk& chunk) {
      slot = chunk[x].data();
      b->affine(chunk, chunk[x].data(), chunk[y].data(), 2.0f, 1.0f);  // every output written: nothing copied out unset
    });
    holder.run();
    ASSERT_NE(slot, nullptr);
    Pipeline p = pipeline();
    p.input(std::span<const float>(slot, 100));
    p.output(c);
    p.compute(noop);
    expect_refused(p, "is device memory");
  }
  {
    Pipeline p = pipeline();
    p.input(std::span<const float>(static_cast<const float*>(nullptr), 10));
    p.output(std::span<float>(c.data(), 10));
    p.compute(noop);
    EXPECT_THROW(p.run(), std::invalid_argument);
  }
}

TEST_P(PipelineTest, RefusesMoreDeviceMemoryThanIsFree) {
  // 256 GiB of untouched address space: never read, because the
  // configuration is refused before any work starts.
  const std::size_t bytes = std::size_t{256} << 30;
  void* huge = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(huge, MAP_FAILED);
  const std::size_t items = bytes / sizeof(float);
  PipelineOptions o;
  o.chunk_items = items;
  Pipeline p = pipeline(o);
  bool computed = false;
  p.input(std::span<const float>(static_cast<const float*>(huge), items));
  p.compute([&](const Chunk&) { computed = true; });
  expect_refused(p, "device memory");  // a 256 GiB ring
  EXPECT_FALSE(computed);
  munmap(huge, bytes);
}

TEST_P(PipelineTest, ThrowingComputeIsPropagatedAndPipelineStaysUsable) {
  const auto in = pattern(10'000);
  std::vector<float> out(in.size());
  PipelineOptions o;
  o.chunk_items = 1000;
  Pipeline p = pipeline(o);
  std::atomic<bool> fail{true};
  const auto x = p.input(in);
  const auto y = p.output(out);
  p.compute([&, x, y](const Chunk& c) {
    if (fail && c.index == 3) throw std::runtime_error("bad chunk 3");
    backend().affine(c, c[x].data(), c[y].data(), 2, 1);
  });
  try {
    p.run();
    ADD_FAILURE() << "the compute callable's exception was lost";
  } catch (const std::runtime_error& e) {
    // How many of the chunks before it the drain had finished depends on timing: 0 to 3.
    EXPECT_TRUE(std::regex_match(std::string(e.what()),
                                 std::regex("the compute callable threw at chunk 3 of 10 \\(items 3000\\.\\.4000\\), stage "
                                            "compute \\(the run stopped with [0-3] of 10 chunks finished\\): bad chunk 3")))
        << e.what();
    // The callable's own exception, nested as it was (the Python module hands it back so).
    EXPECT_EQ(nested_of(e), std::string(typeid(std::runtime_error).name()) + ": bad chunk 3");
  }
  fail = false;
  std::fill(out.begin(), out.end(), std::nanf(""));
  p.run();
  EXPECT_TRUE(is_affine(in, out));
}

TEST_P(PipelineTest, ThrowingChunkDoneIsPropagated) {
  const auto in = pattern(10'000);
  std::vector<float> out(in.size());
  PipelineOptions o;
  o.chunk_items = 1000;
  Pipeline p = pipeline(o);
  affine(p, p.input(in), p.output(out));
  p.on_chunk_done([](std::size_t index, sluice::ItemRange) {
    if (index == 5) throw std::out_of_range("consumer gave up at 5");
  });
  try {
    p.run();
    ADD_FAILURE() << "the chunk-done callable's exception was lost";
  } catch (const std::out_of_range& e) {
    ADD_FAILURE() << "the chunk-done callable's exception came back without the chunk and stage: " << e.what();
  } catch (const std::runtime_error& e) {
    // It was told of chunk 5 once its outputs were in host memory: 6 chunks finished.
    EXPECT_EQ(std::string(e.what()),
              "the chunk-done callable threw at chunk 5 of 10 (items 5000..6000), stage chunk done "
              "(the run stopped with 6 of 10 chunks finished): consumer gave up at 5");
    EXPECT_EQ(nested_of(e), std::string(typeid(std::out_of_range).name()) + ": consumer gave up at 5");
  }
  EXPECT_TRUE(is_affine(std::vector<float>(in.begin(), in.begin() + 6000), std::vector<float>(out.begin(), out.begin() + 6000)));
}

}  // namespace sluice::test
