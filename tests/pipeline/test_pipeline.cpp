// The pipeline's results: every size, depth, memory kind and item type,
// and typed handles that refuse what does not belong to them.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "pipeline/pipeline_access.hpp"
#include "pipeline_test.hpp"
#include "sluice/device_buffer.hpp"
#include "sluice/error.hpp"
#include "sluice/pinned_buffer.hpp"

using sluice::Chunk;
using sluice::Pipeline;
using sluice::PipelineOptions;
using namespace sluice::test;

namespace {

__global__ void mixed(const float* a, const int* b, double* sum, float* product, std::size_t n) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < n) {
    sum[i] = static_cast<double>(a[i]) + b[i];
    product[i] = a[i] * static_cast<float>(b[i]);
  }
}

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
      o.host_memory = sluice::HostMemoryPolicy::stage;
      {  // pageable std::vector in and out
        std::vector<float> out(items, std::nanf(""));
        Pipeline p(o);
        affine(p, p.input(in), p.output(out));
        const auto report = p.run();
        EXPECT_EQ(report.chunk_count, (items + chunk - 1) / chunk);
        EXPECT_TRUE(is_affine(in, out)) << "pageable, " << items << " items, depth " << depth;
      }
      {  // pinned in and out
        sluice::PinnedBuffer<float> pin_in(items), pin_out(items);
        std::copy(in.begin(), in.end(), pin_in.begin());
        std::fill(pin_out.begin(), pin_out.end(), std::nanf(""));
        Pipeline p(o);
        affine(p, p.input(pin_in.span()), p.output(pin_out.span()));
        p.run();
        EXPECT_TRUE(is_affine(in, pin_out.span())) << "pinned, " << items << " items, depth " << depth;
      }
    }
  }
}

namespace {

// An affine transform of 12 MB of floats; the size of every chunk it ran, in order.
struct ChunkSizes {
  std::vector<std::size_t> sizes;
  sluice::RunReport report;
  bool right = false;
};
ChunkSizes chunk_sizes_of(const PipelineOptions& o) {
  const std::size_t n = 3'000'017;
  const auto in = pattern(n);
  std::vector<float> out(n, std::nanf(""));
  Pipeline p(o);
  ChunkSizes r;
  const auto x = p.input(in);
  const auto y = p.output(out);
  p.compute([&r, x, y](const Chunk& c) {
    r.sizes.push_back(c.size());
    launch_affine(c.stream, c[x].data(), c[y].data(), c.size(), 2.0f, 1.0f);
  });
  r.report = p.run();
  r.right = is_affine(in, out);
  return r;
}

}  // namespace

TEST_F(PipelineTest, EqualChunksByDefault) {
  const ChunkSizes r = chunk_sizes_of({});
  EXPECT_TRUE(r.right);
  ASSERT_EQ(r.sizes.size(), r.report.chunk_count);
  ASSERT_GE(r.sizes.size(), 3u);
  for (std::size_t k = 0; k + 1 < r.sizes.size(); ++k) EXPECT_EQ(r.sizes[k], r.report.chunk_items) << "chunk " << k;
  EXPECT_LE(r.sizes.back(), r.report.chunk_items);
}

TEST_F(PipelineTest, RampedChunksWhenAskedFor) {
  PipelineOptions o;
  o.chunk_items = 400'000;
  o.first_chunk_items = 50'000;  // a ramp at both ends
  const ChunkSizes r = chunk_sizes_of(o);
  EXPECT_TRUE(r.right);
  ASSERT_EQ(r.sizes.size(), r.report.chunk_count);
  ASSERT_GE(r.sizes.size(), 3u);
  EXPECT_LT(r.sizes.front(), r.report.chunk_items);
  EXPECT_LT(r.sizes.back(), r.report.chunk_items);
  EXPECT_EQ(*std::max_element(r.sizes.begin(), r.sizes.end()), r.report.chunk_items);
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
  const auto ha = p.input(a);
  const auto hb = p.input(b);
  const auto hs = p.output(sum);
  const auto hp = p.output(product.span());
  static_assert(std::is_same_v<decltype(ha), const sluice::SpanHandle<const float>>);
  static_assert(std::is_same_v<decltype(hs), const sluice::SpanHandle<double>>);
  p.compute([=](const Chunk& c) {
    mixed<<<static_cast<unsigned>((c.size() + 255) / 256), 256, 0, c.stream.get()>>>(c[ha].data(), c[hb].data(),
                                                                                      c[hs].data(), c[hp].data(), c.size());
  });
  p.run();
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(sum[i], static_cast<double>(a[i]) + b[i]) << i;
    ASSERT_EQ(product[i], a[i] * static_cast<float>(b[i])) << i;
  }
}

TEST_F(PipelineTest, InPlaceTransformPageableAndPinned) {
  const std::size_t n = 54'321;
  const auto original = pattern(n);
  PipelineOptions o;
  o.chunk_items = 5000;
  {
    auto data = original;
    Pipeline p(o);
    const auto h = p.inout(data);
    p.compute([h](const Chunk& c) { launch_affine(c.stream, c[h].data(), c[h].data(), c.size(), 2.0f, 1.0f); });
    p.run();
    EXPECT_TRUE(is_affine(original, data));
  }
  {
    sluice::PinnedBuffer<float> data(n);
    std::copy(original.begin(), original.end(), data.begin());
    Pipeline p(o);
    const auto h = p.inout(data.span());
    p.compute([h](const Chunk& c) { launch_affine(c.stream, c[h].data(), c[h].data(), c.size(), 2.0f, 1.0f); });
    p.run();
    EXPECT_TRUE(is_affine(original, data.span()));
  }
}

TEST_F(PipelineTest, ZeroItemsRunsNoChunk) {
  std::vector<float> in, out;
  Pipeline p;
  int calls = 0;
  const auto x = p.input(in);
  const auto y = p.output(out);
  p.compute([&calls, x, y](const Chunk&) { ++calls; });
  const auto report = p.run();
  EXPECT_EQ(report.chunk_count, 0u);
  EXPECT_EQ(calls, 0);
  (void)x;
  (void)y;
}

TEST_F(PipelineTest, ChunkTellsItsPlaceAndCount) {
  const auto in = pattern(10'000);
  std::vector<float> out(in.size());
  PipelineOptions o;
  o.chunk_items = 3000;
  Pipeline p(o);
  const auto x = p.input(in);
  const auto y = p.output(out);
  std::vector<std::pair<std::size_t, std::size_t>> seen;
  p.compute([&seen, x, y](const Chunk& c) {
    seen.emplace_back(c.index, c.count);
    launch_affine(c.stream, c[x].data(), c[y].data(), c.size(), 2.0f, 1.0f);
  });
  p.run();
  ASSERT_EQ(seen.size(), 4u);
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], std::make_pair(i, std::size_t{4}));
}

TEST_F(PipelineTest, HandlesRefuseOtherPipelinesAndWrongTypes) {
  const auto in = pattern(100);
  std::vector<float> out(100);
  Pipeline first, second;
  const auto foreign = first.input(in);
  const auto x = second.input(in);
  const auto y = second.output(out);
  second.compute([foreign](const Chunk& c) { (void)c[foreign]; });
  EXPECT_THROW(second.run(), std::logic_error);  // a handle of the first pipeline
  Pipeline third;
  third.input(in);
  third.output(out);
  third.compute([](const Chunk& c) { (void)c.device<double>(0); });  // floats read as doubles
  try {
    third.run();
    FAIL() << "a type-size mismatch was accepted";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("4 bytes, not 8"), std::string::npos) << e.what();
  }
  (void)x;
  (void)y;
}

TEST_F(PipelineTest, PositionalAccessForBindingsIsChecked) {
  const auto in = pattern(2048);
  std::vector<float> out(in.size(), std::nanf(""));
  Pipeline p;
  const std::size_t x = sluice::detail::PipelineAccess::add_host(p, in.data(), in.size(), sizeof(float), sluice::SpanRole::input);
  const std::size_t y = sluice::detail::PipelineAccess::add_host(p, out.data(), out.size(), sizeof(float), sluice::SpanRole::output);
  p.compute([x, y](const Chunk& c) {
    ASSERT_EQ(c.slots.size(), 2u);
    launch_affine(c.stream, c.device<float>(x), c.device<float>(y), c.size(), 2.0f, 1.0f);
  });
  p.run();
  EXPECT_TRUE(is_affine(in, out));
}
