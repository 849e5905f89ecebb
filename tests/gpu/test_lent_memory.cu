// Memory the caller lends stays the caller's on the GPU: std::vectors freed
// under a live pipeline leave nothing registered, so new vectors at the same
// addresses are pageable, and a second pipeline stages them and computes
// right. (A pipeline that kept them registered made the second one DMA the
// pages that had been registered, not the new vectors' own: every output
// was wrong.) tests/host/test_lent_memory.cpp runs the same on the host
// executor.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "gpu_pipeline_test.hpp"
#include "pipeline/pipeline_access.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/pointer_query.hpp"
#include "sluice/core/stream.hpp"

using sluice::MemoryKind;
using sluice::Pipeline;
using namespace sluice::test;

TEST_F(GpuPipelineTest, VectorsFreedUnderALivePipelineLeaveNewOnesAtTheirAddressesPageable) {
  // 40 MiB each: past malloc's largest mmap threshold (32 MiB), so the pages
  // go back when a vector is freed and the next one is likely mapped there again.
  const std::size_t n = std::size_t{10} << 20, bytes = n * sizeof(float);
  Pipeline first;  // HostMemoryPolicy::automatic, the default
  const void* old_in = nullptr;
  const void* old_out = nullptr;
  {
    std::vector<float> a = pattern(n), b(n, std::nanf(""));
    affine(first, first.input(a), first.output(b));
    first.run();
    std::fill(b.begin(), b.end(), std::nanf(""));
    first.run();  // a pipeline that registered lent memory between runs had done so by now
    EXPECT_TRUE(is_affine(a, b));
    EXPECT_EQ(sluice::memory_kind(a.data(), bytes), MemoryKind::pageable);
    EXPECT_EQ(sluice::memory_kind(b.data(), bytes), MemoryKind::pageable);
    old_in = a.data();
    old_out = b.data();
  }  // the vectors go; `first` lives on

  std::vector<float> c = pattern(n), d(n, std::nanf(""));
  const bool same_addresses = c.data() == old_in || d.data() == old_out;
  EXPECT_EQ(sluice::memory_kind(c.data(), bytes), MemoryKind::pageable);
  EXPECT_EQ(sluice::memory_kind(d.data(), bytes), MemoryKind::pageable);
  Pipeline second;
  affine(second, second.input(c), second.output(d));
  const auto report = second.run();
  EXPECT_TRUE(is_affine(c, d)) << (same_addresses ? "new vectors at the freed ones' addresses" : "new vectors");
  EXPECT_GT(report.volume.staged_in_bytes, 0.0);
  EXPECT_GT(report.volume.staged_out_bytes, 0.0);
  RecordProperty("new_vectors_at_old_addresses", same_addresses ? "yes" : "no");
}

// Memory the pipeline owns (an array given from Python) stays page-locked
// between runs, but only its whole pages: the bytes of its first and last
// pages that belong to neighbours stay pageable, so a copy of a neighbour
// that starts there and runs past the array's pages works (PyTorch's copy
// of a fresh array malloc placed there failed with "invalid argument"). The
// array's own sub-page ends still arrive, replayed or not.
TEST_F(GpuPipelineTest, AnOwnedArrayKeptLockedLeavesItsNeighboursPageable) {
  constexpr std::size_t page = 4096, offset = 100;
  const std::size_t n = 64 * page / sizeof(float);
  std::byte* base = static_cast<std::byte*>(std::aligned_alloc(page, 70 * page));
  float* array = reinterpret_cast<float*>(base + offset);
  const auto in = pattern(n);
  std::copy(in.begin(), in.end(), array);
  const sluice::Stream stream;
  sluice::DeviceBuffer<std::byte> landing(4 * page, stream.view());
  stream.synchronize();
  for (const sluice::Replay replay : {sluice::Replay::none, sluice::Replay::graph}) {
    sluice::PinnedBuffer<float> out(n);
    {
      Pipeline p;
      const std::size_t x = sluice::detail::PipelineAccess::add_host(p, array, n, sizeof(float), sluice::SpanRole::input,
                                                                     std::shared_ptr<const void>(array, [](const void*) {}));
      const auto y = p.output(out.span());
      p.compute([x, y](const sluice::Chunk& c) {
                  launch_affine(c.stream, static_cast<const float*>(c.slots[x].data), c[y].data(), c.size(), 2.0f, 1.0f);
                },
                replay);
      for (int run = 0; run < 4; ++run) {
        std::fill(out.begin(), out.end(), std::nanf(""));
        p.run();
        ASSERT_TRUE(is_affine(in, out.span())) << "run " << run;
      }
      EXPECT_EQ(sluice::memory_kind(base + 2 * page, page), MemoryKind::registered) << "kept page-locked between runs";
      // A neighbour after the array, from its last page into the next: as pageable as it was.
      const std::byte* neighbour = base + offset + n * sizeof(float) + 16;
      EXPECT_EQ(sluice::memory_kind(neighbour, 1), MemoryKind::pageable);
      EXPECT_EQ(cudaMemcpy(landing.data(), neighbour, 2 * page, cudaMemcpyHostToDevice), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(landing.data(), base + 8, offset - 16, cudaMemcpyHostToDevice), cudaSuccess);
    }
    EXPECT_EQ(sluice::memory_kind(base + 2 * page, page), MemoryKind::pageable) << "unlocked with the pipeline";
  }
  std::free(base);
}
