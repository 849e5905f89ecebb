#include "sluice/core/host_fn.hpp"

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "test_kernels.cuh"

using sluice::Stream;

class HostFnTest : public sluice::test::GpuTest {};

TEST_F(HostFnTest, RunsInStreamOrder) {
  Stream s;
  sluice::DeviceBuffer<int> flag(1, s);
  std::vector<int> order;
  sluice::enqueue_host(s, [&] { order.push_back(1); });
  sluice::test::launch_spin_then_write(s, 5000.0, flag.data(), 1);
  sluice::enqueue_host(s, [&] { order.push_back(2); });
  s.synchronize();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST_F(HostFnTest, ExceptionIsRethrownAtSynchronize) {
  Stream s;
  std::atomic<bool> later_ran{false};
  sluice::enqueue_host(s, [] { throw std::runtime_error("batch 3 failed to load"); });
  sluice::enqueue_host(s, [&] { later_ran = true; });
  try {
    s.synchronize();
    FAIL() << "the host function's exception was lost";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "batch 3 failed to load");
  }
  EXPECT_TRUE(later_ran.load());
  EXPECT_NO_THROW(s.synchronize());  // rethrown once, then cleared
}

TEST_F(HostFnTest, ErrorsStayWithTheirStream) {
  Stream failing, healthy;
  sluice::enqueue_host(failing, [] { throw std::logic_error("boom"); });
  sluice::enqueue_host(healthy, [] {});
  EXPECT_NO_THROW(healthy.synchronize());
  EXPECT_THROW(failing.synchronize(), std::logic_error);
}

TEST_F(HostFnTest, DeviceSynchronizeRethrowsFromAnyStream) {
  Stream s;
  sluice::enqueue_host(s, [] { throw std::out_of_range("from a callback"); });
  EXPECT_THROW(sluice::Device(0).synchronize(), std::out_of_range);
  EXPECT_FALSE(sluice::has_host_fn_error(s));
}

TEST_F(HostFnTest, ANewStreamNeverInheritsADeadStreamsError) {
  // The driver hands a destroyed stream's handle to the next stream it makes;
  // an error raised on the old one is reported when it dies and never
  // surfaces on the new one.
  for (int round = 0; round < 10; ++round) {
    testing::internal::CaptureStderr();
    {
      Stream dying;
      sluice::DeviceBuffer<int> flag(1, dying);
      // Still queued behind a kernel when the stream is destroyed.
      sluice::test::launch_spin_then_write(dying, 2000.0, flag.data(), 1);
      sluice::enqueue_host(dying, [] { throw std::runtime_error("from a dead stream"); });
    }
    const std::string reported = testing::internal::GetCapturedStderr();
    EXPECT_NE(reported.find("from a dead stream"), std::string::npos) << "round " << round << ": " << reported;
    Stream fresh;
    sluice::enqueue_host(fresh, [] {});
    EXPECT_NO_THROW(fresh.synchronize()) << "round " << round;
    EXPECT_NO_THROW(sluice::Device(0).synchronize()) << "round " << round;
  }
}
