#pragma once
// Kernels for streams of floats that the file bench and the tests use: a
// reduction and an affine transform, behind plain launch functions.
#include <cstddef>

#include "sluice/stream_view.hpp"

namespace sluice::workloads {

// *total += sum of x[0..n) in double (exact for integer-valued floats below 2^53 in total).
void launch_sum(StreamView stream, const float* x, std::size_t n, double* total);
// y[i] = x[i] * scale + offset.
void launch_affine(StreamView stream, const float* x, float* y, std::size_t n, float scale, float offset);

}  // namespace sluice::workloads
