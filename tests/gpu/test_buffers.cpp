#include <cstdlib>
#include <type_traits>
#include <vector>

#include "gpu_test.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/host_registration.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/pointer_query.hpp"
#include "sluice/core/stream.hpp"
#include "test_kernels.cuh"

using sluice::DeviceBuffer;
using sluice::MemoryKind;
using sluice::PinnedBuffer;
using sluice::Stream;

static_assert(!std::is_copy_constructible_v<PinnedBuffer<float>>);
static_assert(!std::is_copy_constructible_v<DeviceBuffer<float>>);
static_assert(!std::is_copy_constructible_v<sluice::HostRegistration>);
static_assert(std::is_nothrow_move_constructible_v<PinnedBuffer<float>>);
static_assert(std::is_nothrow_move_constructible_v<DeviceBuffer<float>>);

class BufferTest : public sluice::test::GpuTest {};

TEST_F(BufferTest, RoundTripThroughDevice) {
  Stream s;
  const std::size_t n = 100'003;
  DeviceBuffer<float> dev(n, s);
  EXPECT_EQ(dev.stream(), s.view());
  PinnedBuffer<float> host(n);
  for (auto& v : host) v = -1.0f;  // poison: unwritten elements show
  sluice::test::launch_iota(s, dev.data(), n, 0.5f, 3.0f);
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(host.data(), dev.data(), dev.bytes(), cudaMemcpyDeviceToHost, s.get()));
  s.synchronize();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(host[i], static_cast<float>(i) * 0.5f + 3.0f) << "at " << i;
}

TEST_F(BufferTest, MovesLeaveSourceEmpty) {
  Stream s;
  DeviceBuffer<int> a(10, s);
  int* raw = a.data();
  DeviceBuffer<int> b(std::move(a));
  EXPECT_EQ(b.data(), raw);
  EXPECT_EQ(b.size(), 10u);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move)
  PinnedBuffer<int> p(5);
  int* host_raw = p.data();
  PinnedBuffer<int> q;
  q = std::move(p);
  EXPECT_EQ(q.data(), host_raw);
  EXPECT_EQ(p.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  s.synchronize();
}

TEST_F(BufferTest, ZeroSizedBuffersAllocateNothing) {
  Stream s;
  DeviceBuffer<int> d(0, s);
  PinnedBuffer<int> p(0);
  EXPECT_EQ(d.data(), nullptr);
  EXPECT_EQ(p.data(), nullptr);
}

TEST_F(BufferTest, FailedAllocationThrowsCudaErrorNamingTheCall) {
  Stream s;
  try {
    DeviceBuffer<char> huge(std::size_t{1} << 52, s);  // 4 PiB
    FAIL() << "allocation of 4 PiB succeeded";
  } catch (const sluice::CudaError& e) {
    EXPECT_EQ(e.code(), cudaErrorMemoryAllocation);
    EXPECT_NE(std::string(e.what()).find("cudaMallocAsync"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("device_buffer.hpp:"), std::string::npos) << e.what();
  }
  // The failure must not poison later work.
  DeviceBuffer<int> ok(16, s);
  s.synchronize();
}

TEST_F(BufferTest, PointerKinds) {
  Stream s;
  std::vector<int> pageable(1000, 1);
  PinnedBuffer<int> pinned(1000);
  DeviceBuffer<int> device(1000, s);
  s.synchronize();
  EXPECT_EQ(sluice::memory_kind(pageable.data()), MemoryKind::pageable);
  EXPECT_EQ(sluice::memory_kind(pinned.data()), MemoryKind::pinned);
  EXPECT_EQ(sluice::memory_kind(pinned.data(), pinned.bytes()), MemoryKind::pinned);
  EXPECT_EQ(sluice::memory_kind(device.data()), MemoryKind::device);
  {
    sluice::HostRegistration reg(pageable.data(), 1000 * sizeof(int));
    EXPECT_EQ(sluice::memory_kind(pageable.data(), 1000 * sizeof(int)), MemoryKind::registered);
    EXPECT_EQ(sluice::memory_kind(pageable.data() + 999), MemoryKind::registered);
  }
  EXPECT_EQ(sluice::memory_kind(pageable.data()), MemoryKind::pageable);
  int* managed = nullptr;
  ASSERT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&managed), 4096), cudaSuccess);
  EXPECT_EQ(sluice::memory_kind(managed), MemoryKind::managed);
  ASSERT_EQ(cudaFree(managed), cudaSuccess);
}

TEST_F(BufferTest, PartlyRegisteredRangeIsPageable) {
  std::vector<char> data(1 << 20, 1);
  sluice::HostRegistration reg(data.data(), data.size() / 2);
  EXPECT_EQ(sluice::memory_kind(data.data(), data.size() / 2), MemoryKind::registered);
  EXPECT_EQ(sluice::memory_kind(data.data(), data.size()), MemoryKind::pageable);
}

TEST_F(BufferTest, RegistrationRejectsBadArgumentsAndDoubleRegistration) {
  std::vector<char> data(4096, 1);
  EXPECT_THROW(sluice::HostRegistration(nullptr, 10), std::invalid_argument);
  EXPECT_THROW(sluice::HostRegistration(data.data(), 0), std::invalid_argument);
  sluice::HostRegistration first(data.data(), data.size());
  EXPECT_THROW(sluice::HostRegistration(data.data(), data.size()), sluice::CudaError);
  sluice::HostRegistration moved(std::move(first));
  EXPECT_EQ(moved.data(), data.data());
  EXPECT_EQ(first.data(), nullptr);  // NOLINT(bugprone-use-after-move)
}

TEST_F(BufferTest, APageableHoleBetweenRegisteredPartsMakesTheRangePageable) {
  // A registered prefix and suffix around a pageable hole: both ends are
  // page-locked, the range is not; checking the ends alone would say pinned.
  constexpr std::size_t page = 4096;
  void* raw = nullptr;
  ASSERT_EQ(posix_memalign(&raw, page, 12 * page), 0);
  auto* bytes = static_cast<char*>(raw);
  {
    sluice::HostRegistration head(bytes, 4 * page), tail(bytes + 8 * page, 4 * page);
    EXPECT_EQ(sluice::memory_kind(bytes, 4 * page), MemoryKind::registered);
    EXPECT_EQ(sluice::memory_kind(bytes + 11 * page), MemoryKind::registered);
    EXPECT_EQ(sluice::memory_kind(bytes, 12 * page), MemoryKind::pageable);
    const auto extents = sluice::memory_extents(bytes, 12 * page);
    ASSERT_EQ(extents.size(), 2u);  // the walk stops at the hole
    EXPECT_EQ(extents[0].bytes, 4 * page);
    EXPECT_EQ(extents[1].kind, MemoryKind::pageable);
    EXPECT_EQ(extents[1].offset, 4 * page);
  }
  free(raw);
}

TEST_F(BufferTest, ExtentsCutWhereRegistrationsMeet) {
  // Two adjacent registrations: one copy may not cross them, so the walk cuts there.
  constexpr std::size_t page = 4096;
  void* raw = nullptr;
  ASSERT_EQ(posix_memalign(&raw, page, 8 * page), 0);
  auto* bytes = static_cast<char*>(raw);
  {
    sluice::HostRegistration a(bytes, 3 * page), b(bytes + 3 * page, 5 * page);
    const auto extents = sluice::memory_extents(bytes + 100, 8 * page - 200);
    ASSERT_EQ(extents.size(), 2u);
    EXPECT_EQ(extents[0].offset, 0u);
    EXPECT_EQ(extents[0].bytes, 3 * page - 100);
    EXPECT_EQ(extents[1].offset, 3 * page - 100);
    EXPECT_EQ(extents[1].bytes, 5 * page - 100);
    EXPECT_EQ(sluice::memory_kind(bytes, 8 * page), MemoryKind::registered);
  }
  free(raw);
}

TEST_F(BufferTest, OneAllocationIsOneExtent) {
  sluice::PinnedBuffer<int> pinned(1 << 20);
  const auto extents = sluice::memory_extents(pinned.data() + 7, pinned.bytes() - 64);
  ASSERT_EQ(extents.size(), 1u);
  EXPECT_EQ(extents[0].kind, MemoryKind::pinned);
  EXPECT_EQ(extents[0].bytes, pinned.bytes() - 64);
}
