// Failures only a GPU has: a launch the runtime refuses, and a kernel that
// faults. (The pipeline's other failures run on either executor:
// tests/pipeline/test_pipeline_errors.cpp.)
#include <string>
#include <vector>

#include "gpu_pipeline_test.hpp"
#include "sluice/core/error.hpp"

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
}  // namespace

TEST_F(GpuPipelineTest, ABadLaunchConfigurationNamesTheChunk) {
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
TEST_F(GpuPipelineTest, FaultingKernelIsNamedOnceAtOrAfterItsChunk) {
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
