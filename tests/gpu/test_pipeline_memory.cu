// Memory that only a GPU can show: the device's free memory during a run,
// and the kind of the caller's pointers (cudaPointerGetAttributes) during
// and after one. (Capacity and the host-memory policies' results run on
// either executor: tests/pipeline/test_pipeline_memory.cpp.)
#include <memory>
#include <vector>

#include "gpu_pipeline_test.hpp"
#include "pipeline/pipeline_access.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/host_registration.hpp"
#include "sluice/core/pointer_query.hpp"

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

TEST_F(GpuPipelineTest, DeviceMemoryStaysBoundedByTheRing) {
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

namespace {
// The kind of the whole pages inside [p, p + bytes): what sluice page-locks
// of memory it locks itself (the sub-page ends hold other memory too).
MemoryKind inside_kind(const void* p, std::size_t bytes) {
  constexpr std::uintptr_t page = 4096;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t begin = (at + page - 1) / page * page, end = (at + bytes) / page * page;
  return sluice::memory_kind(reinterpret_cast<const void*>(begin), end - begin);
}
}  // namespace

// register_memory page-locks the caller's memory for one run: the copy
// engines read and write it directly while the run goes, and it is
// pageable again, free for anyone to register, once the run has returned.
TEST_F(GpuPipelineTest, RegisterPolicyCopiesDirectlyAndUnregistersAtTheRunsEnd) {
  const std::size_t n = 5'000'000;  // 20 MB of floats each way
  std::vector<float> in = pattern(n), out(n, std::nanf(""));
  PipelineOptions o;
  o.host_memory = HostMemoryPolicy::register_memory;
  Pipeline p(o);
  affine(p, p.input(in), p.output(out));
  MemoryKind during_in = MemoryKind::pageable, during_out = MemoryKind::pageable;
  p.on_chunk_done([&](std::size_t index, sluice::ItemRange) {
    if (index > 0) return;
    during_in = inside_kind(in.data(), n * sizeof(float));
    during_out = inside_kind(out.data(), n * sizeof(float));
  });
  const auto report = p.run();
  EXPECT_EQ(report.volume.staged_in_bytes, 0.0);
  EXPECT_EQ(report.volume.staged_out_bytes, 0.0);
  EXPECT_TRUE(is_affine(in, out));
  EXPECT_TRUE(sluice::is_page_locked_host(during_in)) << to_string(during_in);
  EXPECT_TRUE(sluice::is_page_locked_host(during_out)) << to_string(during_out);
  EXPECT_EQ(sluice::memory_kind(in.data(), n * sizeof(float)), MemoryKind::pageable);
  EXPECT_EQ(sluice::memory_kind(out.data(), n * sizeof(float)), MemoryKind::pageable);
  sluice::HostRegistration mine(in.data(), n * sizeof(float));  // nothing of the run's is left to refuse it
  EXPECT_TRUE(sluice::is_page_locked_host(sluice::memory_kind(in.data(), n * sizeof(float))));
}

// The automatic policy page-locks memory the pipeline keeps alive (a Python
// array) after its first run; the pipeline's end undoes it.
TEST_F(GpuPipelineTest, NothingStaysRegisteredAfterThePipelineEnds) {
  const auto in = std::make_shared<std::vector<float>>(pattern(2'000'000));
  const auto out = std::make_shared<std::vector<float>>(in->size());
  const std::size_t bytes = in->size() * sizeof(float);
  {
    PipelineOptions o;
    o.host_memory = HostMemoryPolicy::automatic;
    Pipeline p(o);
    using sluice::detail::PipelineAccess;
    const std::size_t x = PipelineAccess::add_host(p, in->data(), in->size(), sizeof(float), sluice::SpanRole::input, in);
    const std::size_t y = PipelineAccess::add_host(p, out->data(), out->size(), sizeof(float), sluice::SpanRole::output, out);
    p.compute([x, y](const Chunk& c) { launch_affine(c.stream, c.device<float>(x), c.device<float>(y), c.size(), 2, 1); });
    p.run();  // starts registering in the background
    EXPECT_TRUE(is_affine(*in, *out));
    std::fill(out->begin(), out->end(), std::nanf(""));
    EXPECT_EQ(p.run().volume.staged_in_bytes, 0.0);  // registered by now: copied directly
    EXPECT_TRUE(sluice::is_page_locked_host(inside_kind(in->data(), bytes)));
  }  // joins any locking still going, then unregisters
  EXPECT_EQ(sluice::memory_kind(in->data(), bytes), MemoryKind::pageable);
  EXPECT_EQ(sluice::memory_kind(out->data(), bytes), MemoryKind::pageable);
  EXPECT_TRUE(is_affine(*in, *out));
}
