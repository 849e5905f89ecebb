#pragma once
// Kernels for streams of floats that the file bench and the tests use: a
// reduction and an affine transform, behind plain launch functions.
#include <cstddef>
#include <cstdint>

#include "sluice/core/stream_view.hpp"

namespace sluice::workloads {

// *total += sum of x[0..n) in double (exact for integer-valued floats below 2^53 in total).
void launch_sum(StreamView stream, const float* x, std::size_t n, double* total);
// y[i] = x[i] * scale + offset.
void launch_affine(StreamView stream, const float* x, float* y, std::size_t n, float scale, float offset);

// A training step of set cost: spins `ns` of the GPU's clock on every SM,
// then adds a checksum of the batch into *checksum, so that every batch a
// step saw can be checked against the file.
void launch_training_step(StreamView stream, std::uint64_t ns, const std::int32_t* inputs, const std::int32_t* targets,
                          std::size_t n, unsigned long long* checksum);
// The same checksum on the CPU.
unsigned long long batch_checksum(const std::int32_t* inputs, const std::int32_t* targets, std::size_t n);
// inputs/targets (int32, n each) from raw windows of `seq` + 1 tokens of `token_bytes` (2 or 4): what a loader does.
void launch_widen(StreamView stream, const void* raw, std::size_t token_bytes, std::int32_t* inputs, std::int32_t* targets,
                  std::size_t rows, std::size_t seq);

}  // namespace sluice::workloads
