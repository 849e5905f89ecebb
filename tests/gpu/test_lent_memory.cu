// Memory the caller lends stays the caller's on the GPU: std::vectors freed
// under a live pipeline leave nothing registered, so new vectors at the same
// addresses are pageable, and a second pipeline stages them and computes
// right. (A pipeline that kept them registered made the second one DMA the
// pages that had been registered, not the new vectors' own: every output
// was wrong.) tests/host/test_lent_memory.cpp runs the same on the host
// executor.
#include <cmath>
#include <vector>

#include "gpu_pipeline_test.hpp"
#include "sluice/core/pointer_query.hpp"

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
