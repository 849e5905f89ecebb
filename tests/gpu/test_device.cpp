#include "sluice/core/device.hpp"

#include "gpu_test.hpp"
#include "sluice/core/error.hpp"

class DeviceTest : public sluice::test::GpuTest {};

TEST_F(DeviceTest, InfoDescribesARealDevice) {
  auto info = sluice::Device(0).info();
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GE(info.async_engine_count, 1);
  EXPECT_GT(info.total_memory_bytes, 0u);
  EXPECT_GT(info.free_memory_bytes, 0u);
  EXPECT_LE(info.free_memory_bytes, info.total_memory_bytes);
  EXPECT_LE(info.greatest_stream_priority, info.least_stream_priority);
  EXPECT_FALSE(info.pci_bus_id.empty());
  EXPECT_GE(info.compute_major, 7);
}

TEST_F(DeviceTest, RejectsMissingOrdinal) {
  EXPECT_THROW(sluice::Device(sluice::Device::count()), std::invalid_argument);
  EXPECT_THROW(sluice::Device(-1), std::invalid_argument);
}

TEST_F(DeviceTest, CudaErrorNamesCallErrorAndLocation) {
  try {
    SLUICE_CUDA_CHECK(cudaSetDevice(9999));
    FAIL() << "cudaSetDevice(9999) succeeded";
  } catch (const sluice::CudaError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), cudaErrorInvalidDevice);
    EXPECT_NE(what.find("cudaSetDevice(9999)"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorInvalidDevice"), std::string::npos) << what;
    EXPECT_NE(what.find("test_device.cpp:"), std::string::npos) << what;
    sluice::CudaError wrapped(e, "chunk 7, stage compute");
    EXPECT_EQ(std::string(wrapped.what()).rfind("chunk 7, stage compute: cudaSetDevice", 0), 0u);
    EXPECT_EQ(wrapped.code(), cudaErrorInvalidDevice);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a thrown error must not linger for the next launch check";
}

TEST(DeviceWithoutGpu, CountIsConsistentWithReason) {
  // Runs everywhere: no GPU means count 0 and a reason; a GPU means no reason.
  if (sluice::Device::count() == 0)
    EXPECT_FALSE(sluice::Device::unavailable_reason().empty());
  else
    EXPECT_TRUE(sluice::Device::unavailable_reason().empty());
}
