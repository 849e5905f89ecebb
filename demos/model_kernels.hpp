#pragma once
// Stand-ins for a model's layers in the multi-GPU demos: kernels whose cost is
// set by an iteration count (dependent FMAs on every element, so they occupy
// the SMs the way real layers do and slow down when something shares them),
// and whose results are exact, so a run can be checked bit for bit.
#include <cstddef>
#include <cstdint>

#include "sluice/core/stream_view.hpp"

namespace sluice::demo {

// y[i] = a * x[i] + b * z[i] + c (z may be null: b is then unused), after
// `iterations` dependent FMAs per element that do not change y.
void launch_costly_affine(StreamView stream, const float* x, const float* z, float* y, std::size_t n, float a, float b,
                          float c, std::uint32_t iterations);

// grad[i] = gradient_value(rank, layer, i), after `iterations` FMAs per element.
void launch_costly_gradient(StreamView stream, float* grad, std::size_t n, int rank, int layer,
                            std::uint32_t iterations);

#ifdef __CUDACC__
#define SLUICE_HOST_DEVICE __host__ __device__
#else
#define SLUICE_HOST_DEVICE
#endif

// An integer below 64 (exact in a float, and in a sum of up to 2^18 of them).
// The kernel and the host check share this one definition.
SLUICE_HOST_DEVICE constexpr float gradient_value(int rank, int layer, std::size_t i) {
  return static_cast<float>((static_cast<std::size_t>(rank + 1) * 7 + static_cast<std::size_t>(layer) * 3 + i) % 64);
}

}  // namespace sluice::demo
