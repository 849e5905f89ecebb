#include "sluice/pipeline.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "gpu_test.hpp"
#include "sluice/device_buffer.hpp"
#include "sluice/error.hpp"
#include "sluice/pinned_buffer.hpp"

using sluice::Chunk;
using sluice::Pipeline;
using sluice::PipelineOptions;

namespace {

__global__ void affine(const float* in, float* out, std::size_t n, float scale, float offset) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = in[i] * scale + offset;
}

__global__ void mixed(const float* a, const int* b, double* sum, float* product, std::size_t n) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < n) {
    sum[i] = static_cast<double>(a[i]) + b[i];
    product[i] = a[i] * static_cast<float>(b[i]);
  }
}

__global__ void accumulate(const int* in, unsigned long long* total, std::size_t n) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < n) atomicAdd(total, static_cast<unsigned long long>(in[i]));
}

__global__ void write_through(float* out, std::size_t n) {
  // Runs a few milliseconds, as real kernels do, then writes far outside any
  // allocation: a fault the pipeline must report.
  const long long start = clock64();
  while (clock64() - start < 4'000'000) {}
  float* wild = out + (std::size_t{1} << 40);
  if (threadIdx.x == 0 && blockIdx.x == 0 && n > 0) *wild = 1.0f;
}

unsigned blocks(std::size_t n) { return static_cast<unsigned>((n + 255) / 256); }

void launch_affine(const Chunk& c, float scale, float offset, std::size_t in_span = 0, std::size_t out_span = 1) {
  if (c.size() == 0) return;
  affine<<<blocks(c.size()), 256, 0, c.stream.get()>>>(c.device<const float>(in_span), c.device<float>(out_span),
                                                        c.size(), scale, offset);
}

std::vector<float> pattern(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7919) % 10007) * 0.25f + 1.0f;
  return v;
}

// Every element written (the poison is NaN) and equal to 2 * in + 1.
template <typename Out>
void expect_affine(const std::vector<float>& in, const Out& out, const char* what) {
  ASSERT_EQ(in.size(), out.size());
  for (std::size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(out[i], in[i] * 2.0f + 1.0f) << what << ": element " << i << " of " << in.size();
}

class PipelineTest : public sluice::test::GpuTest {};

}  // namespace

TEST_F(PipelineTest, OddSizesEveryDepthPageableAndPinned) {
  const std::size_t chunk = 1000;
  for (std::size_t items : {std::size_t{1}, chunk - 1, chunk, chunk + 1, std::size_t{7919}, 3 * chunk}) {
    for (std::size_t depth = 1; depth <= 4; ++depth) {
      const auto in = pattern(items);
      PipelineOptions o;
      o.chunk_items = chunk;
      o.depth = depth;
      o.staging_threads = 2;
      {  // pageable std::vector in and out
        std::vector<float> out(items, std::nanf(""));
        Pipeline p(o);
        p.input(in).output(out).compute([](const Chunk& c) { launch_affine(c, 2.0f, 1.0f); });
        auto report = p.run();
        EXPECT_EQ(report.chunk_count, (items + chunk - 1) / chunk);
        expect_affine(in, out, "pageable");
      }
      {  // pinned in and out
        sluice::PinnedBuffer<float> pin_in(items), pin_out(items);
        std::copy(in.begin(), in.end(), pin_in.begin());
        std::fill(pin_out.begin(), pin_out.end(), std::nanf(""));
        Pipeline p(o);
        p.input(pin_in.span()).output(pin_out.span()).compute([](const Chunk& c) { launch_affine(c, 2.0f, 1.0f); });
        p.run();
        expect_affine(in, pin_out.span(), "pinned");
      }
    }
  }
}

TEST_F(PipelineTest, SeveralSpansOfDifferentTypes) {
  const std::size_t n = 100'003;
  auto a = pattern(n);
  std::vector<int> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<int>(i % 97) - 40;
  std::vector<double> sum(n, std::nan(""));
  sluice::PinnedBuffer<float> product(n);  // one pinned output beside pageable spans
  std::fill(product.begin(), product.end(), std::nanf(""));
  PipelineOptions o;
  o.chunk_items = 4096;
  Pipeline p(o);
  p.input(a).input(b).output(sum).output(product.span()).compute([](const Chunk& c) {
    mixed<<<blocks(c.size()), 256, 0, c.stream.get()>>>(c.device<const float>(0), c.device<const int>(1),
                                                          c.device<double>(2), c.device<float>(3), c.size());
  });
  p.run();
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(sum[i], static_cast<double>(a[i]) + b[i]) << i;
    ASSERT_EQ(product[i], a[i] * static_cast<float>(b[i])) << i;
  }
}

TEST_F(PipelineTest, InPlaceTransform) {
  const std::size_t n = 54'321;
  const auto original = pattern(n);
  auto data = original;
  PipelineOptions o;
  o.chunk_items = 5000;
  Pipeline p(o);
  p.inout(data).compute([](const Chunk& c) { launch_affine(c, 2.0f, 1.0f, 0, 0); });
  p.run();
  expect_affine(original, data, "in place");
}

TEST_F(PipelineTest, NoOutputsReductionIntoCallerDeviceMemory) {
  const std::size_t n = 1'000'001;
  std::vector<int> values(n);
  std::iota(values.begin(), values.end(), 1);
  sluice::DeviceBuffer<unsigned long long> total(1, sluice::StreamView());
  SLUICE_CUDA_CHECK(cudaMemsetAsync(total.data(), 0, sizeof(unsigned long long), total.stream().get()));
  total.stream().synchronize();
  PipelineOptions o;
  o.chunk_items = 65536;
  o.compute_streams = 2;
  Pipeline p(o);
  unsigned long long* sum = total.data();
  p.input(values).compute([sum](const Chunk& c) {
    accumulate<<<blocks(c.size()), 256, 0, c.stream.get()>>>(c.device<const int>(0), sum, c.size());
  });
  p.run();
  unsigned long long host = 0;
  SLUICE_CUDA_CHECK(cudaMemcpy(&host, sum, sizeof host, cudaMemcpyDeviceToHost));
  EXPECT_EQ(host, static_cast<unsigned long long>(n) * (n + 1) / 2);
}

TEST_F(PipelineTest, DeviceMemoryStaysBoundedByTheRing) {
  const std::size_t n = std::size_t{64} << 20;  // 256 MiB of floats in, 256 MiB out
  std::vector<float> in(n, 1.5f), out(n, std::nanf(""));
  PipelineOptions o;
  o.chunk_items = 1 << 18;  // 1 MiB per span per slot
  o.depth = 3;
  std::size_t free_before = 0, total = 0, lowest_free = SIZE_MAX;
  SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  Pipeline p(o);
  p.input(in).output(out).compute([](const Chunk& c) { launch_affine(c, 2.0f, 1.0f); });
  p.on_chunk_done([&](std::size_t, sluice::ItemRange) {
    std::size_t free_now = 0, t = 0;
    SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_now, &t));
    lowest_free = std::min(lowest_free, free_now);
  });
  p.run();
  const std::size_t ring = 3 * 2 * (std::size_t{1} << 20);
  // The ring plus allocator granularity; the data is 512 MiB.
  EXPECT_LT(free_before - lowest_free, ring + (std::size_t{64} << 20));
  EXPECT_EQ(out[n - 1], 4.0f);
  EXPECT_EQ(out[0], 4.0f);
}

TEST_F(PipelineTest, BadConfigurationsAreRejectedBeforeWork) {
  std::vector<float> a(100), b(99), c(100);
  auto noop = [](const Chunk&) {};
  EXPECT_THROW(Pipeline(PipelineOptions{.depth = 0}), std::invalid_argument);
  EXPECT_THROW(Pipeline(PipelineOptions{.compute_streams = 0}), std::invalid_argument);
  {
    Pipeline p;
    EXPECT_THROW(p.run(), std::invalid_argument);  // no spans
    p.input(a).output(c);
    EXPECT_THROW(p.run(), std::invalid_argument);  // no compute
  }
  {
    Pipeline p;
    p.input(a).input(b).output(c).compute(noop);
    try {
      p.run();
      FAIL() << "mismatched spans accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("span 1 has 99 items"), std::string::npos) << e.what();
    }
  }
  {
    Pipeline p;
    p.input(std::span<const float>(a)).output(std::span<float>(a.data() + 10, 50)).compute(noop);
    EXPECT_THROW(p.run(), std::invalid_argument);  // output overlaps input
  }
  {
    sluice::DeviceBuffer<float> device(100, sluice::StreamView());
    device.stream().synchronize();
    Pipeline p;
    p.input(std::span<const float>(device.data(), 100)).output(c).compute(noop);
    EXPECT_THROW(p.run(), std::invalid_argument);  // device memory is not a host span
  }
  {
    Pipeline p;
    p.input(std::span<const float>(static_cast<const float*>(nullptr), 10)).output(std::span<float>(c.data(), 10));
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
  std::vector<float> out_small(1);
  PipelineOptions o;
  o.chunk_items = items;
  Pipeline p(o);
  bool computed = false;
  p.input(std::span<const float>(static_cast<const float*>(huge), items)).compute([&](const Chunk&) { computed = true; });
  try {
    p.run();
    ADD_FAILURE() << "a 256 GiB ring was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("device memory"), std::string::npos) << e.what();
  }
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
  p.input(in).output(out).compute([&](const Chunk& c) {
    if (fail && c.index == 3) throw std::runtime_error("bad chunk 3");
    launch_affine(c, 2.0f, 1.0f);
  });
  EXPECT_THROW(p.run(), std::runtime_error);
  fail = false;
  std::fill(out.begin(), out.end(), std::nanf(""));
  p.run();
  expect_affine(in, out, "after a failed run");
}

TEST_F(PipelineTest, ThrowingChunkDoneIsPropagated) {
  const auto in = pattern(10'000);
  std::vector<float> out(in.size());
  PipelineOptions o;
  o.chunk_items = 1000;
  Pipeline p(o);
  p.input(in).output(out).compute([](const Chunk& c) { launch_affine(c, 2.0f, 1.0f); });
  p.on_chunk_done([](std::size_t index, sluice::ItemRange) {
    if (index == 5) throw std::out_of_range("consumer gave up at 5");
  });
  EXPECT_THROW(p.run(), std::out_of_range);
}

TEST_F(PipelineTest, SubmitReportsChunksInOrderWithOutputReady) {
  const auto in = pattern(50'000);
  std::vector<float> out(in.size(), std::nanf(""));
  PipelineOptions o;
  o.chunk_items = 3000;
  Pipeline p(o);
  std::vector<std::size_t> order;
  bool all_ready = true;
  p.input(in).output(out).compute([](const Chunk& c) { launch_affine(c, 2.0f, 1.0f); });
  p.on_chunk_done([&](std::size_t index, sluice::ItemRange items) {
    order.push_back(index);
    for (std::size_t i = items.begin; i < items.end; ++i) all_ready &= out[i] == in[i] * 2.0f + 1.0f;
  });
  auto submission = p.submit();
  EXPECT_THROW(p.submit(), std::logic_error);  // one run per pipeline at a time
  submission.wait();
  std::vector<std::size_t> expected((in.size() + 2999) / 3000);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(order, expected);
  EXPECT_TRUE(all_ready) << "a chunk was reported done before its output was in host memory";
}

TEST_F(PipelineTest, TwoPipelinesAtOnce) {
  const auto in1 = pattern(200'000), in2 = pattern(150'001);
  std::vector<float> out1(in1.size(), std::nanf("")), out2(in2.size(), std::nanf(""));
  PipelineOptions o;
  o.chunk_items = 8192;
  Pipeline p1(o), p2(o);
  p1.input(in1).output(out1).compute([](const Chunk& c) { launch_affine(c, 2.0f, 1.0f); });
  p2.input(in2).output(out2).compute([](const Chunk& c) { launch_affine(c, 2.0f, 1.0f); });
  auto s1 = p1.submit();
  auto s2 = p2.submit();
  s2.wait();
  s1.wait();
  expect_affine(in1, out1, "first");
  expect_affine(in2, out2, "second");
}

TEST_F(PipelineTest, RecordingGivesOrderedIntervalsAndStageCosts) {
  const auto in = pattern(1 << 20);
  std::vector<float> out(in.size());
  PipelineOptions o;
  o.chunk_items = 1 << 16;
  o.record = true;
  Pipeline p(o);
  p.input(in).output(out).compute([](const Chunk& c) { launch_affine(c, 2.0f, 1.0f); });
  auto report = p.run();
  ASSERT_EQ(report.chunk_count, 16u);
  std::size_t device_intervals = 0, staging = 0;
  for (const auto& i : report.intervals) {
    EXPECT_LE(i.start_ms, i.end_ms);
    EXPECT_GE(i.start_ms, -0.01);
    EXPECT_LE(i.end_ms, report.wall_ms + 0.01);
    if (i.lane == sluice::Lane::stage_in || i.lane == sluice::Lane::stage_out) ++staging;
    else ++device_intervals;
  }
  EXPECT_EQ(device_intervals, 3u * 16u);
  EXPECT_EQ(staging, 2u * 16u);  // pageable in and out
  // A chunk's stages run in order: H2D ends before its compute starts.
  for (const auto& h : report.intervals)
    for (const auto& k : report.intervals)
      if (h.chunk == k.chunk && h.lane == sluice::Lane::h2d && k.lane == sluice::Lane::compute)
        EXPECT_LE(h.end_ms, k.start_ms + 0.01);
  EXPECT_GT(report.busy_ms(sluice::Lane::h2d), 0.0);
  auto costs = p.measure_stage_costs(2);
  EXPECT_GT(costs.h2d_ms, 0.0);
  EXPECT_GT(costs.d2h_ms, 0.0);
  EXPECT_GT(costs.kernel_ms, 0.0);
  EXPECT_GT(costs.bidirectional_gbps, 0.0);
  EXPECT_DOUBLE_EQ(costs.h2d_bytes, static_cast<double>(in.size() * sizeof(float)));
}

// A faulting kernel poisons the whole CUDA context, so it runs in a child
// process of its own (a "threadsafe" death test re-executes the binary).
TEST_F(PipelineTest, FaultingKernelNamesChunkAndStage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const auto in = pattern(10'000);
        std::vector<float> out(in.size());
        PipelineOptions o;
        o.chunk_items = 1000;
        Pipeline p(o);
        p.input(in).output(out).compute([](const Chunk& c) {
          if (c.index == 4)
            write_through<<<1, 32, 0, c.stream.get()>>>(c.device<float>(1), c.size());
          else
            launch_affine(c, 2.0f, 1.0f);
        });
        try {
          p.run();
        } catch (const sluice::CudaError& e) {
          std::fprintf(stderr, "caught: %s\n", e.what());
          std::exit(0);
        }
        std::exit(3);
      },
      ::testing::ExitedWithCode(0),
      "caught: chunk 4 \\(items 4000..5000\\), stage compute: a kernel launched by the compute callable failed: "
      "cudaErrorIllegalAddress");
}
