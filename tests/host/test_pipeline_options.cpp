#include "sluice/pipeline/pipeline_options.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

using sluice::compute_stream_count;
using sluice::KernelOrder;
using sluice::PipelineOptions;

TEST(PipelineOptions, KernelOrderPicksTheComputeStreams) {
  PipelineOptions o;
  EXPECT_EQ(compute_stream_count(o), 1u);  // in chunk order by default
  o.kernel_order = KernelOrder::independent;
  EXPECT_EQ(compute_stream_count(o), 2u);
  o.compute_streams = 3;
  EXPECT_EQ(compute_stream_count(o), 3u);
  o.compute_streams = 1;
  EXPECT_EQ(compute_stream_count(o), 1u);
}

TEST(PipelineOptions, OutOfOrderStreamsForOrderedKernelsAreRefused) {
  PipelineOptions o;
  o.compute_streams = 1;
  EXPECT_EQ(compute_stream_count(o), 1u);
  o.compute_streams = 2;
  try {
    compute_stream_count(o);
    FAIL() << "two compute streams were allowed for kernels in chunk order";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("independent"), std::string::npos) << e.what();
  }
}
