#pragma once
// What the GPU-only pipeline tests share: the fixture that skips without a
// GPU, and y = 2x + 1 as a kernel. The data and checks are the ones every
// pipeline test uses (tests/pipeline/pipeline_test.hpp).
#include "gpu_test.hpp"
#include "pipeline_test.hpp"
#include "sluice/pipeline/pipeline.hpp"
#include "test_kernels.cuh"

namespace sluice::test {

// y = 2x + 1 through the pipeline, with typed handles (Replay::graph: captured and replayed).
inline void affine(Pipeline& p, SpanHandle<const float> in, SpanHandle<float> out, Replay replay = Replay::none) {
  p.compute([in, out](const Chunk& c) { launch_affine(c.stream, c[in].data(), c[out].data(), c.size(), 2.0f, 1.0f); },
            replay);
}

class GpuPipelineTest : public GpuTest {};

}  // namespace sluice::test
