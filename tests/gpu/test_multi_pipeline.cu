// The multi-GPU pipeline's devices are checked before anything else. (Its
// runs go on either executor: tests/pipeline/test_multi_pipeline.cpp.)
#include "gpu_pipeline_test.hpp"
#include "sluice/core/device.hpp"
#include "sluice/multigpu/multi_pipeline.hpp"

using namespace sluice::test;

TEST_F(GpuPipelineTest, MultiPipelineRefusesADeviceThatDoesNotExist) {
  EXPECT_THROW(sluice::MultiPipeline({sluice::Device::count()}), std::invalid_argument);
  EXPECT_THROW(sluice::MultiPipeline({0, -1}), std::invalid_argument);
}
