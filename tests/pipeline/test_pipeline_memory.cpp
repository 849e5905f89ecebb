// Memory: capacity is kept across runs, and every host-memory policy gives
// the same bytes as pinned memory. (What only a GPU can show, its free
// memory during a run and the kind of a pointer, is in
// tests/gpu/test_pipeline_memory.cu.)
#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <vector>

#include "pipeline/pipeline_access.hpp"
#include "pipeline/schedule/chunking.hpp"
#include "pipeline_test.hpp"
#include "sluice/measure/model.hpp"

using sluice::Chunk;
using sluice::HostMemoryPolicy;
using sluice::Pipeline;
using sluice::PipelineOptions;

namespace sluice::test {

TEST_P(PipelineTest, CapacityIsKeptAcrossRunsOfPinnedPageableAndSmallerData) {
  const std::size_t n = 3'000'000;
  const auto values = pattern(n);
  auto pin_in = backend().pinned<float>(n), pin_out = backend().pinned<float>(n);
  std::copy(values.begin(), values.end(), pin_in.begin());
  std::vector<float> page_in(values), page_out(n);
  std::vector<float> small_in = pattern(n / 3), small_out(n / 3);
  PipelineOptions o;
  o.chunk_items = 1 << 18;
  o.host_memory = HostMemoryPolicy::stage;
  Pipeline p = pipeline(o);
  const auto x = p.input(pin_in.span());
  const auto y = p.output(pin_out.span());
  affine(p, x, y);

  auto first = p.run();  // pinned: device slots only
  EXPECT_GT(first.device_bytes_allocated, 0u);
  EXPECT_EQ(first.pinned_bytes_allocated, 0u);
  EXPECT_TRUE(is_affine(values, pin_out.span()));

  p.rebind(x, page_in);  // pageable: pinned staging appears, the device ring stays
  p.rebind(y, page_out);
  const auto second = p.run();
  EXPECT_EQ(second.device_bytes_allocated, 0u);
  EXPECT_GT(second.pinned_bytes_allocated, 0u);
  EXPECT_TRUE(is_affine(values, page_out));

  p.rebind(x, small_in);  // smaller data: nothing new
  p.rebind(y, small_out);
  const std::size_t free_before = backend().free_device_bytes();
  const auto third = p.run();
  EXPECT_EQ(third.device_bytes_allocated, 0u);
  EXPECT_EQ(third.pinned_bytes_allocated, 0u);
  EXPECT_EQ(backend().free_device_bytes(), free_before);
  EXPECT_TRUE(is_affine(small_in, small_out));
}

TEST_P(PipelineTest, EveryHostPolicyGivesTheBytesPinnedMemoryGives) {
  for (std::size_t items : {std::size_t{1}, std::size_t{4097}, std::size_t{1'000'003}}) {
    const auto values = pattern(items);
    auto pin_in = backend().pinned<float>(items), pin_out = backend().pinned<float>(items);
    std::copy(values.begin(), values.end(), pin_in.begin());
    std::fill(pin_out.begin(), pin_out.end(), std::nanf(""));
    {
      Pipeline p = pipeline();
      affine(p, p.input(pin_in.span()), p.output(pin_out.span()));
      p.run();
    }
    for (auto policy : {HostMemoryPolicy::stage, HostMemoryPolicy::register_memory, HostMemoryPolicy::automatic}) {
      std::vector<float> in(values), out(items, std::nanf(""));
      PipelineOptions o;
      o.host_memory = policy;
      Pipeline p = pipeline(o);
      affine(p, p.input(in), p.output(out));
      for (int run = 0; run < 3; ++run) {  // the automatic policy may change its path between runs
        std::fill(out.begin(), out.end(), std::nanf(""));
        p.run();
        ASSERT_EQ(std::memcmp(out.data(), pin_out.data(), items * sizeof(float)), 0)
            << items << " items, policy " << static_cast<int>(policy) << ", run " << run;
      }
    }
  }
}

namespace {
// The pinned stage-in slots the schedule gives a run staged both ways in chunks of `chunk_bytes`.
std::size_t stage_in_ring(std::size_t chunk_bytes) {
  PipelineOptions o;
  o.chunk_items = chunk_bytes / sizeof(float);
  const auto s = sluice::plan_schedule(o, sluice::array_spans(1, 1, sizeof(float), true), 64 * o.chunk_items);
  return s.ring_size(sluice::Ring::pinned_in);
}
}  // namespace

TEST_P(PipelineTest, StagingBothWaysPicksItsOwnDefaultChunks) {
  const std::size_t n = std::size_t{8} << 20;  // 32 MiB of floats per span
  std::vector<float> in = pattern(n), out(n, std::nanf(""));
  PipelineOptions o;
  o.host_memory = HostMemoryPolicy::stage;
  Pipeline staged = pipeline(o);
  affine(staged, staged.input(in), staged.output(out));
  const sluice::RunReport report = staged.run();
  const std::size_t chunk = sluice::default_chunking(n, sizeof(float), {.host_copies_both_ways = true}).chunk_items;
  EXPECT_EQ(report.chunk_items, chunk);
  EXPECT_TRUE(is_affine(in, out));
  // Pinned slots: the schedule's stage-in ring on the way in, depth + 1 on the way out.
  const std::size_t chunk_bytes = chunk * sizeof(float);
  EXPECT_EQ(report.pinned_bytes_allocated, (stage_in_ring(chunk_bytes) + o.depth + 1) * chunk_bytes);
  EXPECT_GT(stage_in_ring(chunk_bytes), 3u);  // else the count tells nothing

  // Pinned both ways, or staged only on the way in: the usual sizes.
  auto pin_in = backend().pinned<float>(n), pin_out = backend().pinned<float>(n);
  std::copy(in.begin(), in.end(), pin_in.begin());
  Pipeline pinned = pipeline();
  affine(pinned, pinned.input(pin_in.span()), pinned.output(pin_out.span()));
  EXPECT_EQ(pinned.run().chunk_items, sluice::default_chunking(n, sizeof(float)).chunk_items);
  Pipeline in_only = pipeline(o);
  affine(in_only, in_only.input(in), in_only.output(pin_out.span()));
  EXPECT_EQ(in_only.run().chunk_items, sluice::default_chunking(n, sizeof(float)).chunk_items);
  EXPECT_NE(sluice::default_chunking(n, sizeof(float), {.host_copies_both_ways = true}).chunk_items,
            sluice::default_chunking(n, sizeof(float)).chunk_items);  // else this test tells nothing
}

// Memory the pipeline keeps alive (a Python array: PipelineAccess::add_host
// with its owner) is staged on its first run, page-locked in the
// background after it, and copied directly from then on.
TEST_P(PipelineTest, AutomaticPolicyRegistersInTheBackgroundThenCopiesDirectly) {
  const auto in = std::make_shared<std::vector<float>>(pattern(4'000'000));
  const auto out = std::make_shared<std::vector<float>>(in->size(), std::nanf(""));
  Pipeline p = pipeline();  // automatic is the default
  using sluice::detail::PipelineAccess;
  const std::size_t x = PipelineAccess::add_host(p, in->data(), in->size(), sizeof(float), SpanRole::input, in);
  const std::size_t y = PipelineAccess::add_host(p, out->data(), out->size(), sizeof(float), SpanRole::output, out);
  p.compute([x, y, b = &backend()](const Chunk& c) { b->affine(c, c.device<float>(x), c.device<float>(y), 2, 1); });
  const auto first = p.run();
  EXPECT_GT(first.volume.staged_in_bytes, 0.0);  // the first run stages
  EXPECT_TRUE(is_affine(*in, *out));
  bool direct = false;
  std::string notes;
  for (int run = 0; run < 50 && !direct; ++run) {
    std::fill(out->begin(), out->end(), std::nanf(""));
    const auto later = p.run();
    direct = later.volume.staged_in_bytes == 0 && later.volume.staged_out_bytes == 0;
    for (const auto& note : later.notes) notes += note + "; ";
    ASSERT_TRUE(is_affine(*in, *out)) << "run " << run;
  }
  EXPECT_TRUE(direct) << "the spans were never registered: " << notes;
}

TEST_P(PipelineTest, ReadOnlyMappedInputIsStagedOrRegisteredButAlwaysRight) {
  // A read-only anonymous mapping stands in for an mmap'd input file.
  const std::size_t n = 1 << 20;
  void* raw = mmap(nullptr, n * sizeof(float), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(raw, MAP_FAILED);
  auto* data = static_cast<float*>(raw);
  const auto values = pattern(n);
  std::copy(values.begin(), values.end(), data);
  ASSERT_EQ(mprotect(raw, n * sizeof(float), PROT_READ), 0);
  for (auto policy : {HostMemoryPolicy::stage, HostMemoryPolicy::automatic}) {
    std::vector<float> out(n, std::nanf(""));
    PipelineOptions o;
    o.host_memory = policy;
    Pipeline p = pipeline(o);
    affine(p, p.input(std::span<const float>(data, n)), p.output(out));
    for (int run = 0; run < 3; ++run) {
      std::fill(out.begin(), out.end(), std::nanf(""));
      p.run();
      ASSERT_TRUE(is_affine(values, out)) << "policy " << static_cast<int>(policy) << ", run " << run;
    }
  }
  munmap(raw, n * sizeof(float));
}

}  // namespace sluice::test
