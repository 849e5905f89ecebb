// Bad input refused before work, failures that name what failed and where,
// and a pipeline that stays usable after them.
#include <sys/mman.h>

#include <atomic>
#include <string>
#include <vector>

#include "pipeline_test.hpp"
#include "sluice/device_buffer.hpp"
#include "sluice/error.hpp"

using sluice::Chunk;
using sluice::Pipeline;
using sluice::PipelineOptions;
using namespace sluice::test;

namespace {
__global__ void write_through(float* out, std::size_t n) {
  // Runs a few milliseconds, as real kernels do, then writes far outside any
  // allocation: a fault the pipeline must report.
  const long long start = clock64();
  while (clock64() - start < 4'000'000) {}
  float* wild = out + (std::size_t{1} << 40);
  if (threadIdx.x == 0 && blockIdx.x == 0 && n > 0) *wild = 1.0f;
}

// Runs `p` and expects it refused before any work, with `text` in the message.
void expect_refused(Pipeline& p, const std::string& text) {
  try {
    p.run();
    ADD_FAILURE() << "accepted; expected a refusal naming '" << text << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}
}  // namespace

TEST_F(PipelineTest, BadConfigurationsAreRejectedBeforeWork) {
  std::vector<float> a(100), b(99), c(100);
  auto noop = [](const Chunk&) {};
  PipelineOptions zero_depth;
  zero_depth.depth = 0;
  EXPECT_THROW(Pipeline{zero_depth}, std::invalid_argument);
  PipelineOptions out_of_order;
  out_of_order.compute_streams = 2;  // kernels in chunk order, the default, need one
  EXPECT_THROW(Pipeline{out_of_order}, std::invalid_argument);
  {
    Pipeline p;
    EXPECT_THROW(p.run(), std::invalid_argument);  // no spans
    p.input(a);
    p.output(c);
    EXPECT_THROW(p.run(), std::invalid_argument);  // no compute
  }
  {
    Pipeline p;
    p.input(a);
    p.input(b);
    p.output(c);
    p.compute(noop);
    expect_refused(p, "span 1 (input) has 99 items");
  }
  {
    Pipeline p;
    p.input(std::span<const float>(a));
    p.output(std::span<float>(a.data() + 10, 50));
    p.compute(noop);
    EXPECT_THROW(p.run(), std::invalid_argument);  // output overlaps input
  }
  {
    sluice::DeviceBuffer<float> device(100, sluice::StreamView());
    device.stream().synchronize();
    Pipeline p;
    p.input(std::span<const float>(device.data(), 100));
    p.output(c);
    p.compute(noop);
    expect_refused(p, "is device memory");
  }
  {
    Pipeline p;
    p.input(std::span<const float>(static_cast<const float*>(nullptr), 10));
    p.output(std::span<float>(c.data(), 10));
    p.compute(noop);
    EXPECT_THROW(p.run(), std::invalid_argument);
  }
}

TEST_F(PipelineTest, RefusesMoreDeviceMemoryThanIsFree) {
  // 256 GiB of untouched address space: never read, because the
  // configuration is refused before any work starts.
  const std::size_t bytes = std::size_t{256} << 30;
  void* huge = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(huge, MAP_FAILED);
  const std::size_t items = bytes / sizeof(float);
  PipelineOptions o;
  o.chunk_items = items;
  Pipeline p(o);
  bool computed = false;
  p.input(std::span<const float>(static_cast<const float*>(huge), items));
  p.compute([&](const Chunk&) { computed = true; });
  expect_refused(p, "device memory");  // a 256 GiB ring
  EXPECT_FALSE(computed);
  munmap(huge, bytes);
}

TEST_F(PipelineTest, ThrowingComputeIsPropagatedAndPipelineStaysUsable) {
  const auto in = pattern(10'000);
  std::vector<float> out(in.size());
  PipelineOptions o;
  o.chunk_items = 1000;
  Pipeline p(o);
  std::atomic<bool> fail{true};
  const auto x = p.input(in);
  const auto y = p.output(out);
  p.compute([&, x, y](const Chunk& c) {
    if (fail && c.index == 3) throw std::runtime_error("bad chunk 3");
    launch_affine(c.stream, c[x].data(), c[y].data(), c.size(), 2, 1);
  });
  try {
    p.run();
    ADD_FAILURE() << "the compute callable's exception was lost";
  } catch (const sluice::CudaError& e) {
    ADD_FAILURE() << "a CUDA error instead of the callable's own: " << e.what();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad chunk 3"), std::string::npos) << e.what();
  }
  fail = false;
  std::fill(out.begin(), out.end(), std::nanf(""));
  p.run();
  EXPECT_TRUE(is_affine(in, out));
}

TEST_F(PipelineTest, ThrowingChunkDoneIsPropagated) {
  const auto in = pattern(10'000);
  std::vector<float> out(in.size());
  PipelineOptions o;
  o.chunk_items = 1000;
  Pipeline p(o);
  affine(p, p.input(in), p.output(out));
  p.on_chunk_done([](std::size_t index, sluice::ItemRange) {
    if (index == 5) throw std::out_of_range("consumer gave up at 5");
  });
  try {
    p.run();
    ADD_FAILURE() << "the chunk-done callable's exception was lost";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("consumer gave up at 5"), std::string::npos) << e.what();
  }
}

TEST_F(PipelineTest, ABadLaunchConfigurationNamesTheChunk) {
  const auto in = pattern(10'000);
  std::vector<float> out(in.size());
  PipelineOptions o;
  o.chunk_items = 1000;
  Pipeline p(o);
  const auto x = p.input(in);
  const auto y = p.output(out);
  p.compute([x, y](const Chunk& c) {
    if (c.index == 2) {
      write_through<<<1, 4096, 0, c.stream.get()>>>(c[y].data(), c.size());  // 4096 threads per block: refused
      return;
    }
    launch_affine(c.stream, c[x].data(), c[y].data(), c.size(), 2, 1);
  });
  try {
    p.run();
    FAIL() << "a bad launch went unnoticed";
  } catch (const sluice::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("chunk 2 of 10 (items 2000..3000), stage compute"), std::string::npos) << e.what();
  }
  std::fill(out.begin(), out.end(), std::nanf(""));
  p.compute([x, y](const Chunk& c) { launch_affine(c.stream, c[x].data(), c[y].data(), c.size(), 2, 1); });
  p.run();  // a launch error is not sticky: the pipeline carries on
  EXPECT_TRUE(is_affine(in, out));
}

// A faulting kernel poisons the whole CUDA context, so it runs in a child
// process of its own (a "threadsafe" death test re-executes the binary).
// The message says honestly what is known, and the sticky error is not
// repeated for every resource released after it.
TEST_F(PipelineTest, FaultingKernelIsNamedOnceAtOrAfterItsChunk) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const auto in = pattern(10'000);
        std::vector<float> out(in.size());
        PipelineOptions o;
        o.chunk_items = 1000;
        {
          Pipeline p(o);
          const auto x = p.input(in);
          const auto y = p.output(out);
          p.compute([x, y](const Chunk& c) {
            if (c.index == 4)
              write_through<<<1, 32, 0, c.stream.get()>>>(c[y].data(), c.size());
            else
              launch_affine(c.stream, c[x].data(), c[y].data(), c.size(), 2, 1);
          });
          try {
            p.run();
          } catch (const sluice::CudaError& e) {
            std::fprintf(stderr, "caught: %s\n", e.what());
          }
        }  // releasing the pipeline after the fault: silent
        std::fprintf(stderr, "released\n");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      "^caught: chunk 4 of 10 \\(items 4000..5000\\), stage compute \\(the run stopped with 4 of 10 chunks finished\\): "
      "at or after this chunk; every chunk before it had completed: a kernel launched by the compute callable failed: "
      "cudaErrorIllegalAddress[^\n]*\nreleased\n$");
}
