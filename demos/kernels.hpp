#pragma once
// Kernels the demos share, behind plain launch functions: busy-waits that take
// a known time, and simple transforms whose results are easy to check.
#include <cstddef>
#include <cstdint>

#include "sluice/core/stream_view.hpp"

namespace sluice::demo {

// `blocks` blocks spin for `ns` nanoseconds of the GPU's global timer; block 0
// then writes when it started and ended (ns) and sets *done = 1. Pointers may be null.
void launch_sleep(StreamView stream, std::uint64_t ns, std::uint64_t* start, std::uint64_t* end, int* done,
                  unsigned blocks = 1, unsigned threads = 32);
// y[i] = x[i] * scale + offset.
void launch_affine(StreamView stream, const float* x, float* y, std::size_t n, float scale, float offset);
// One block spins `ns`, then sets data[i] = value for all i: a slow producer
// that leaves the rest of the GPU free.
void launch_delayed_fill(StreamView stream, std::uint64_t ns, int* data, std::size_t n, int value);
// dst[i] = src[i]: a consumer of what a producer wrote.
void launch_copy_ints(StreamView stream, const int* src, int* dst, std::size_t n);

}  // namespace sluice::demo
