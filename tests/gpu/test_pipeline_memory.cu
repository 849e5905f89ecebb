// Memory: the device ring stays bounded, capacity is kept across runs, and
// every host-memory policy gives the same bytes as pinned memory.
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "pipeline_test.hpp"
#include "sluice/model.hpp"
#include "sluice/chunking.hpp"
#include "sluice/error.hpp"
#include "sluice/host_registration.hpp"
#include "sluice/pinned_buffer.hpp"
#include "sluice/pointer_query.hpp"

using sluice::Chunk;
using sluice::HostMemoryPolicy;
using sluice::MemoryKind;
using sluice::Pipeline;
using sluice::PipelineOptions;
using namespace sluice::test;

namespace {
std::size_t free_device_bytes() {
  std::size_t free_bytes = 0, total = 0;
  SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
}
}  // namespace

TEST_F(PipelineTest, DeviceMemoryStaysBoundedByTheRing) {
  const std::size_t n = std::size_t{64} << 20;  // 256 MiB of floats in, 256 MiB out
  std::vector<float> in(n, 1.5f), out(n, std::nanf(""));
  PipelineOptions o;
  o.chunk_items = 1 << 18;  // 1 MiB per span per slot
  o.depth = 3;
  const std::size_t free_before = free_device_bytes();
  std::size_t lowest_free = free_before;
  Pipeline p(o);
  affine(p, p.input(in), p.output(out));
  p.on_chunk_done([&](std::size_t, sluice::ItemRange) { lowest_free = std::min(lowest_free, free_device_bytes()); });
  p.run();
  const std::size_t ring = 3 * 2 * (std::size_t{1} << 20);
  // The ring plus allocator granularity; the data is 512 MiB.
  EXPECT_LT(free_before - lowest_free, ring + (std::size_t{64} << 20));
  EXPECT_EQ(out[n - 1], 4.0f);
  EXPECT_EQ(out[0], 4.0f);
}

TEST_F(PipelineTest, CapacityIsKeptAcrossRunsOfPinnedPageableAndSmallerData) {
  const std::size_t n = 3'000'000;
  const auto values = pattern(n);
  sluice::PinnedBuffer<float> pin_in(n), pin_out(n);
  std::copy(values.begin(), values.end(), pin_in.begin());
  std::vector<float> page_in(values), page_out(n);
  std::vector<float> small_in = pattern(n / 3), small_out(n / 3);
  PipelineOptions o;
  o.chunk_items = 1 << 18;
  o.host_memory = HostMemoryPolicy::stage;
  Pipeline p(o);
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
  const std::size_t free_before = free_device_bytes();
  const auto third = p.run();
  EXPECT_EQ(third.device_bytes_allocated, 0u);
  EXPECT_EQ(third.pinned_bytes_allocated, 0u);
  EXPECT_EQ(free_device_bytes(), free_before);
  EXPECT_TRUE(is_affine(small_in, small_out));
}

TEST_F(PipelineTest, EveryHostPolicyGivesTheBytesPinnedMemoryGives) {
  for (std::size_t items : {std::size_t{1}, std::size_t{4097}, std::size_t{1'000'003}}) {
    const auto values = pattern(items);
    sluice::PinnedBuffer<float> pin_in(items), pin_out(items);
    std::copy(values.begin(), values.end(), pin_in.begin());
    std::fill(pin_out.begin(), pin_out.end(), std::nanf(""));
    {
      Pipeline p;
      affine(p, p.input(pin_in.span()), p.output(pin_out.span()));
      p.run();
    }
    for (auto policy : {HostMemoryPolicy::stage, HostMemoryPolicy::register_memory, HostMemoryPolicy::automatic}) {
      std::vector<float> in(values), out(items, std::nanf(""));
      PipelineOptions o;
      o.host_memory = policy;
      Pipeline p(o);
      affine(p, p.input(in), p.output(out));
      for (int run = 0; run < 3; ++run) {  // the automatic policy changes its path between runs
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

TEST_F(PipelineTest, StagingBothWaysPicksItsOwnDefaultChunks) {
  const std::size_t n = std::size_t{8} << 20;  // 32 MiB of floats per span
  std::vector<float> in = pattern(n), out(n, std::nanf(""));
  PipelineOptions o;
  o.host_memory = HostMemoryPolicy::stage;
  Pipeline staged(o);
  affine(staged, staged.input(in), staged.output(out));
  const sluice::RunReport report = staged.run();
  const std::size_t chunk = sluice::default_chunking(n, sizeof(float), true).chunk_items;
  EXPECT_EQ(report.chunk_items, chunk);
  EXPECT_TRUE(is_affine(in, out));
  // Pinned slots: the schedule's stage-in ring on the way in, depth + 1 on the way out.
  const std::size_t chunk_bytes = chunk * sizeof(float);
  EXPECT_EQ(report.pinned_bytes_allocated, (stage_in_ring(chunk_bytes) + o.depth + 1) * chunk_bytes);
  EXPECT_GT(stage_in_ring(chunk_bytes), 3u);  // else the count tells nothing

  // Pinned both ways, or staged only on the way in: the usual sizes.
  sluice::PinnedBuffer<float> pin_in(n), pin_out(n);
  std::copy(in.begin(), in.end(), pin_in.begin());
  Pipeline pinned;
  affine(pinned, pinned.input(pin_in.span()), pinned.output(pin_out.span()));
  EXPECT_EQ(pinned.run().chunk_items, sluice::default_chunking(n, sizeof(float)).chunk_items);
  Pipeline in_only(o);
  affine(in_only, in_only.input(in), in_only.output(pin_out.span()));
  EXPECT_EQ(in_only.run().chunk_items, sluice::default_chunking(n, sizeof(float)).chunk_items);
  EXPECT_NE(sluice::default_chunking(n, sizeof(float), true).chunk_items,
            sluice::default_chunking(n, sizeof(float)).chunk_items);  // else this test tells nothing
}

TEST_F(PipelineTest, RegisterPolicyCopiesDirectlyAndUnregistersOnClear) {
  const std::size_t n = 5'000'000;  // 20 MB of floats each way
  std::vector<float> in = pattern(n), out(n, std::nanf(""));
  PipelineOptions o;
  o.host_memory = HostMemoryPolicy::register_memory;
  Pipeline p(o);
  affine(p, p.input(in), p.output(out));
  const auto report = p.run();
  EXPECT_EQ(report.volume.staged_in_bytes, 0.0);
  EXPECT_EQ(report.volume.staged_out_bytes, 0.0);
  EXPECT_TRUE(is_affine(in, out));
  EXPECT_TRUE(sluice::is_page_locked_host(sluice::memory_kind(in.data(), n * sizeof(float))));
  // Nobody may register it twice while the pipeline holds it.
  try {
    sluice::HostRegistration again(in.data(), n * sizeof(float));
    FAIL() << "memory registered twice";
  } catch (const sluice::CudaError& e) {
    EXPECT_EQ(e.code(), cudaErrorHostMemoryAlreadyRegistered);
    EXPECT_NE(std::string(e.what()).find("cudaHostRegister"), std::string::npos) << e.what();
  }
  p.clear_spans();
  EXPECT_EQ(sluice::memory_kind(in.data(), n * sizeof(float)), MemoryKind::pageable);
  EXPECT_EQ(sluice::memory_kind(out.data(), n * sizeof(float)), MemoryKind::pageable);
}

TEST_F(PipelineTest, NothingStaysRegisteredAfterThePipelineEnds) {
  std::vector<float> in = pattern(2'000'000), out(in.size());
  {
    PipelineOptions o;
    o.host_memory = HostMemoryPolicy::automatic;
    Pipeline p(o);
    affine(p, p.input(in), p.output(out));
    p.run();  // starts registering in the background
  }           // joins that, then unregisters
  EXPECT_EQ(sluice::memory_kind(in.data(), in.size() * sizeof(float)), MemoryKind::pageable);
  EXPECT_EQ(sluice::memory_kind(out.data(), out.size() * sizeof(float)), MemoryKind::pageable);
  EXPECT_TRUE(is_affine(in, out));
}

TEST_F(PipelineTest, AutomaticPolicyRegistersInTheBackgroundThenCopiesDirectly) {
  std::vector<float> in = pattern(4'000'000), out(in.size(), std::nanf(""));
  Pipeline p;  // automatic is the default
  affine(p, p.input(in), p.output(out));
  const auto first = p.run();
  EXPECT_GT(first.volume.staged_in_bytes, 0.0);  // the first run stages
  bool direct = false;
  std::string notes;
  for (int run = 0; run < 50 && !direct; ++run) {
    std::fill(out.begin(), out.end(), std::nanf(""));
    const auto later = p.run();
    direct = later.volume.staged_in_bytes == 0 && later.volume.staged_out_bytes == 0;
    for (const auto& note : later.notes) notes += note + "; ";
    ASSERT_TRUE(is_affine(in, out)) << "run " << run;
  }
  EXPECT_TRUE(direct) << "the spans were never registered: " << notes;
}

TEST_F(PipelineTest, ReadOnlyMappedInputIsStagedOrRegisteredButAlwaysRight) {
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
    Pipeline p(o);
    affine(p, p.input(std::span<const float>(data, n)), p.output(out));
    for (int run = 0; run < 3; ++run) {
      std::fill(out.begin(), out.end(), std::nanf(""));
      p.run();
      ASSERT_TRUE(is_affine(values, out)) << "policy " << static_cast<int>(policy) << ", run " << run;
    }
  }
  munmap(raw, n * sizeof(float));
}
