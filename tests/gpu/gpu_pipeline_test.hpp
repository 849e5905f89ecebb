#pragma once
// What the pipeline tests share: data that is never all zeros, outputs
// poisoned with NaN, and a check that every element was written right.
#include <cmath>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "sluice/pipeline.hpp"
#include "test_kernels.cuh"

namespace sluice::test {

inline std::vector<float> pattern(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7919) % 10007) * 0.25f + 1.0f;
  return v;
}

// Every element written (the poison is NaN) and equal to 2 * in + 1.
template <typename In, typename Out>
::testing::AssertionResult is_affine(const In& in, const Out& out) {
  if (std::size(in) != std::size(out)) return ::testing::AssertionFailure() << "sizes differ";
  for (std::size_t i = 0; i < std::size(in); ++i)
    if (!(out[i] == in[i] * 2.0f + 1.0f))
      return ::testing::AssertionFailure() << "element " << i << " of " << std::size(in) << " is " << out[i]
                                           << ", expected " << in[i] * 2.0f + 1.0f;
  return ::testing::AssertionSuccess();
}

// y = 2x + 1 through the pipeline, with typed handles.
inline void affine(Pipeline& p, SpanHandle<const float> in, SpanHandle<float> out) {
  p.compute([in, out](const Chunk& c) { launch_affine(c.stream, c[in].data(), c[out].data(), c.size(), 2.0f, 1.0f); });
}

class PipelineTest : public GpuTest {};

}  // namespace sluice::test
