#include "sluice/core/stream.hpp"

#include <type_traits>

#include "gpu_test.hpp"
#include "sluice/core/error.hpp"

using sluice::Stream;
using sluice::StreamView;

static_assert(!std::is_copy_constructible_v<Stream>);
static_assert(std::is_nothrow_move_constructible_v<Stream>);
static_assert(std::is_trivially_copyable_v<StreamView>);

class StreamTest : public sluice::test::GpuTest {};

TEST_F(StreamTest, CreatesNonBlockingStreamWithPriority) {
  int least = 0, greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  Stream s(greatest);
  ASSERT_NE(s.get(), nullptr);
  EXPECT_EQ(s.view().priority(), greatest);
  unsigned flags = 0;
  ASSERT_EQ(cudaStreamGetFlags(s.get(), &flags), cudaSuccess);
  EXPECT_EQ(flags & cudaStreamNonBlocking, static_cast<unsigned>(cudaStreamNonBlocking));
  s.synchronize();
  EXPECT_TRUE(s.ready());
}

TEST_F(StreamTest, BlockingFlagIsHonoured) {
  Stream s(0, sluice::StreamFlags::blocking);
  unsigned flags = 1;
  ASSERT_EQ(cudaStreamGetFlags(s.get(), &flags), cudaSuccess);
  EXPECT_EQ(flags & cudaStreamNonBlocking, 0u);
}

TEST_F(StreamTest, RejectsPriorityOutsideDeviceRange) {
  int least = 0, greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  EXPECT_THROW(Stream(least + 1), std::invalid_argument);
  EXPECT_THROW(Stream(greatest - 1), std::invalid_argument);
}

TEST_F(StreamTest, MoveTransfersOwnership) {
  Stream a;
  const cudaStream_t raw = a.get();
  Stream b(std::move(a));
  EXPECT_EQ(b.get(), raw);
  EXPECT_EQ(a.get(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  Stream c;
  c = std::move(b);
  EXPECT_EQ(c.get(), raw);
  EXPECT_EQ(b.get(), nullptr);  // NOLINT(bugprone-use-after-move)
  c.synchronize();
}

TEST_F(StreamTest, ViewComparesByHandle) {
  Stream a, b;
  EXPECT_EQ(a.view(), StreamView(a.get()));
  EXPECT_FALSE(a.view() == b.view());
  EXPECT_EQ(StreamView().get(), cudaStreamPerThread);
}

// stream_view.hpp spells the per-thread stream's handle out (it includes no
// CUDA header): it must be the runtime's. Needs no device.
TEST(StreamViewHandle, TheDefaultIsThePerThreadStream) { EXPECT_EQ(sluice::StreamView().get(), cudaStreamPerThread); }
