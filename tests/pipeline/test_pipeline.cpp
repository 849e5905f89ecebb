// The pipeline's results: every size, depth, memory kind and item type,
// and typed handles that refuse what does not belong to them.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/pipeline_access.hpp"
#include "pipeline_test.hpp"

using sluice::Chunk;
using sluice::Pipeline;
using sluice::PipelineOptions;

namespace sluice::test {

TEST_P(PipelineTest, OddSizesEveryDepthPageableAndPinned) {
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
        Pipeline p = pipeline(o);
        affine(p, p.input(in), p.output(out));
        const auto report = p.run();
        EXPECT_EQ(report.chunk_count, (items + chunk - 1) / chunk);
        EXPECT_TRUE(is_affine(in, out)) << "pageable, " << items << " items, depth " << depth;
      }
      {  // pinned in and out
        auto pin_in = backend().pinned<float>(items), pin_out = backend().pinned<float>(items);
        std::copy(in.begin(), in.end(), pin_in.begin());
        std::fill(pin_out.begin(), pin_out.end(), std::nanf(""));
        Pipeline p = pipeline(o);
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
ChunkSizes chunk_sizes_of(Backend& backend, const PipelineOptions& o) {
  const std::size_t n = 3'000'017;
  const auto in = pattern(n);
  std::vector<float> out(n, std::nanf(""));
  Pipeline p = backend.pipeline(o);
  ChunkSizes r;
  const auto x = p.input(in);
  const auto y = p.output(out);
  p.compute([&r, &backend, x, y](const Chunk& c) {
    r.sizes.push_back(c.size());
    backend.affine(c, c[x].data(), c[y].data(), 2.0f, 1.0f);
  });
  r.report = p.run();
  r.right = is_affine(in, out);
  return r;
}

}  // namespace

TEST_P(PipelineTest, EqualChunksByDefault) {
  const ChunkSizes r = chunk_sizes_of(backend(), {});
  EXPECT_TRUE(r.right);
  ASSERT_EQ(r.sizes.size(), r.report.chunk_count);
  ASSERT_GE(r.sizes.size(), 3u);
  for (std::size_t k = 0; k + 1 < r.sizes.size(); ++k) EXPECT_EQ(r.sizes[k], r.report.chunk_items) << "chunk " << k;
  EXPECT_LE(r.sizes.back(), r.report.chunk_items);
}

TEST_P(PipelineTest, RampedChunksWhenAskedFor) {
  PipelineOptions o;
  o.chunk_items = 400'000;
  o.first_chunk_items = 50'000;  // a ramp at both ends
  const ChunkSizes r = chunk_sizes_of(backend(), o);
  EXPECT_TRUE(r.right);
  ASSERT_EQ(r.sizes.size(), r.report.chunk_count);
  ASSERT_GE(r.sizes.size(), 3u);
  EXPECT_LT(r.sizes.front(), r.report.chunk_items);
  EXPECT_LT(r.sizes.back(), r.report.chunk_items);
  EXPECT_EQ(*std::max_element(r.sizes.begin(), r.sizes.end()), r.report.chunk_items);
}

TEST_P(PipelineTest, SeveralSpansOfDifferentTypes) {
  const std::size_t n = 100'003;
  auto a = pattern(n);
  std::vector<int> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<int>(i % 97) - 40;
  std::vector<double> sum(n, std::nan(""));
  auto product = backend().pinned<float>(n);  // one pinned output beside pageable spans
  std::fill(product.begin(), product.end(), std::nanf(""));
  PipelineOptions o;
  o.chunk_items = 4096;
  Pipeline p = pipeline(o);
  const auto ha = p.input(a);
  const auto hb = p.input(b);
  const auto hs = p.output(sum);
  const auto hp = p.output(product.span());
  static_assert(std::is_same_v<decltype(ha), const sluice::SpanHandle<const float>>);
  static_assert(std::is_same_v<decltype(hs), const sluice::SpanHandle<double>>);
  p.compute([=, b = &backend()](const Chunk& c) { b->mixed(c, c[ha].data(), c[hb].data(), c[hs].data(), c[hp].data()); });
  p.run();
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(sum[i], static_cast<double>(a[i]) + b[i]) << i;
    ASSERT_EQ(product[i], a[i] * static_cast<float>(b[i])) << i;
  }
}

TEST_P(PipelineTest, InPlaceTransformPageableAndPinned) {
  const std::size_t n = 54'321;
  const auto original = pattern(n);
  PipelineOptions o;
  o.chunk_items = 5000;
  auto in_place = [b = &backend()](SpanHandle<float> h) {
    return [b, h](const Chunk& c) { b->affine(c, c[h].data(), c[h].data(), 2.0f, 1.0f); };
  };
  {
    auto data = original;
    Pipeline p = pipeline(o);
    p.compute(in_place(p.inout(data)));
    p.run();
    EXPECT_TRUE(is_affine(original, data));
  }
  {
    auto data = backend().pinned<float>(n);
    std::copy(original.begin(), original.end(), data.begin());
    Pipeline p = pipeline(o);
    p.compute(in_place(p.inout(data.span())));
    p.run();
    EXPECT_TRUE(is_affine(original, data.span()));
  }
}

TEST_P(PipelineTest, ZeroItemsRunsNoChunk) {
  std::vector<float> in, out;
  Pipeline p = pipeline();
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

TEST_P(PipelineTest, ChunkTellsItsPlaceAndCount) {
  const auto in = pattern(10'000);
  std::vector<float> out(in.size());
  PipelineOptions o;
  o.chunk_items = 3000;
  Pipeline p = pipeline(o);
  const auto x = p.input(in);
  const auto y = p.output(out);
  std::vector<std::pair<std::size_t, std::size_t>> seen;
  p.compute([&seen, b = &backend(), x, y](const Chunk& c) {
    seen.emplace_back(c.index, c.count);
    b->affine(c, c[x].data(), c[y].data(), 2.0f, 1.0f);
  });
  p.run();
  ASSERT_EQ(seen.size(), 4u);
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], std::make_pair(i, std::size_t{4}));
}

TEST_P(PipelineTest, HandlesRefuseOtherPipelinesAndWrongTypes) {
  const auto in = pattern(100);
  std::vector<float> out(100);
  Pipeline first = pipeline(), second = pipeline();
  const auto foreign = first.input(in);
  const auto x = second.input(in);
  const auto y = second.output(out);
  // What the chunk refuses inside the compute callable comes back as the
  // callable's failure: named with its chunk, the refusal nested in it.
  auto refusal = [](Pipeline& p) -> std::string {
    try {
      p.run();
      return "accepted";
    } catch (const std::runtime_error& e) {
      try {
        std::rethrow_if_nested(e);
      } catch (const std::logic_error& refused) {
        return refused.what();
      }
      return std::string("nothing nested in: ") + e.what();
    }
  };
  second.compute([foreign](const Chunk& c) { (void)c[foreign]; });
  EXPECT_NE(refusal(second).find("belongs to another pipeline"), std::string::npos);  // a handle of the first pipeline
  Pipeline third = pipeline();
  third.input(in);
  third.output(out);
  third.compute([](const Chunk& c) { (void)c.device<double>(0); });  // floats read as doubles
  const std::string mismatch = refusal(third);
  EXPECT_NE(mismatch.find("4 bytes, not 8"), std::string::npos) << mismatch;
  (void)x;
  (void)y;
}

TEST_P(PipelineTest, PositionalAccessForBindingsIsChecked) {
  const auto in = pattern(2048);
  std::vector<float> out(in.size(), std::nanf(""));
  Pipeline p = pipeline();
  const std::size_t x = sluice::detail::PipelineAccess::add_host(p, in.data(), in.size(), sizeof(float), sluice::SpanRole::input);
  const std::size_t y = sluice::detail::PipelineAccess::add_host(p, out.data(), out.size(), sizeof(float), sluice::SpanRole::output);
  p.compute([x, y, b = &backend()](const Chunk& c) {
    ASSERT_EQ(c.slots.size(), 2u);
    b->affine(c, c.device<float>(x), c.device<float>(y), 2.0f, 1.0f);
  });
  p.run();
  EXPECT_TRUE(is_affine(in, out));
}

}  // namespace sluice::test
