#pragma once
// Base fixture for tests that need a GPU: they skip, saying why, where none
// is usable (CI has nvcc but no GPU), and run for real where one is.
#include <gtest/gtest.h>

#include "sluice/core/device.hpp"

namespace sluice::test {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Device::count() == 0) GTEST_SKIP() << "no CUDA device: " << Device::unavailable_reason();
    Device(0).make_current();
  }
};

}  // namespace sluice::test
