#include "sluice/core/event.hpp"

#include <type_traits>

#include "gpu_test.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "test_kernels.cuh"

using sluice::Event;
using sluice::Stream;

static_assert(!std::is_copy_constructible_v<Event>);
static_assert(std::is_nothrow_move_constructible_v<Event>);

class EventTest : public sluice::test::GpuTest {};

TEST_F(EventTest, ElapsedTimeCoversTheWork) {
  Stream s;
  sluice::DeviceBuffer<int> flag(1, s);
  Event start(Event::Timing::enabled), stop(Event::Timing::enabled);
  start.record(s);
  sluice::test::launch_spin_then_write(s, 2000.0, flag.data(), 1);  // ~2 ms
  stop.record(s);
  stop.synchronize();
  EXPECT_TRUE(stop.ready());
  const float ms = sluice::elapsed_ms(start, stop);
  EXPECT_GT(ms, 1.0f);
  EXPECT_LT(ms, 1000.0f);
}

TEST_F(EventTest, ElapsedNeedsTimingEvents) {
  Stream s;
  Event a, b;
  a.record(s);
  b.record(s);
  b.synchronize();
  EXPECT_THROW(sluice::elapsed_ms(a, b), std::invalid_argument);
}

TEST_F(EventTest, ReadyIsFalseWhileWorkIsPending) {
  Stream s;
  sluice::DeviceBuffer<int> flag(1, s);
  Event done;
  sluice::test::launch_spin_then_write(s, 50000.0, flag.data(), 1);  // ~50 ms
  done.record(s);
  EXPECT_FALSE(done.ready());
  done.synchronize();
  EXPECT_TRUE(done.ready());
}

// Stream b must see what stream a wrote before the event: a slow writer in a,
// a reader in b that waits on the event. Without the wait the reader would
// run first and read the old value.
TEST_F(EventTest, WaitOrdersWorkAcrossStreams) {
  Stream a, b;
  sluice::DeviceBuffer<int> flag(1, a), seen(1, a);
  ASSERT_EQ(cudaMemsetAsync(flag.data(), 0, sizeof(int), a.get()), cudaSuccess);
  a.synchronize();
  Event written;
  sluice::test::launch_spin_then_write(a, 20000.0, flag.data(), 42);
  written.record(a);
  b.wait(written);
  sluice::test::launch_copy_word(b, flag.data(), seen.data());
  sluice::PinnedBuffer<int> host(1);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), seen.data(), sizeof(int), cudaMemcpyDeviceToHost, b.get()), cudaSuccess);
  b.synchronize();
  EXPECT_EQ(host[0], 42);
}

TEST_F(EventTest, MoveTransfersOwnership) {
  Event a(Event::Timing::enabled);
  const cudaEvent_t raw = a.get();
  Event b(std::move(a));
  EXPECT_EQ(b.get(), raw);
  EXPECT_TRUE(b.timing_enabled());
  EXPECT_EQ(a.get(), nullptr);  // NOLINT(bugprone-use-after-move)
}
