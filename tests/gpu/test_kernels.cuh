#pragma once
// Small kernels the GPU tests use to hold a stream busy, mark order, and
// compute things whose results are easy to check.
#include <cstddef>
#include <cstdint>

#include "sluice/core/stream_view.hpp"

namespace sluice::test {

// Busy-waits about `microseconds` on the device, then writes `value` to *flag.
void launch_spin_then_write(StreamView stream, double microseconds, int* flag, int value);
// Copies *from into *to (one thread): reads what earlier work wrote.
void launch_copy_word(StreamView stream, const int* from, int* to);
// Writes out[i] = i * scale + offset for i < n.
void launch_iota(StreamView stream, float* out, std::size_t n, float scale, float offset);
// out[i] = in[i] * scale + offset.
void launch_affine(StreamView stream, const float* in, float* out, std::size_t n, float scale, float offset);
// Spins `microseconds` first, then out[i] = in[i] * scale + offset: reads its
// input late, so a slot overwritten too early shows in the output.
void launch_late_affine(StreamView stream, double microseconds, const float* in, float* out, std::size_t n, float scale,
                        float offset);
// One thread, in order: out[i] = (*carry += in[i]). State from chunk to chunk.
void launch_running_sum(StreamView stream, const std::int64_t* in, std::int64_t* out, std::size_t n, std::int64_t* carry);
// *total += sum of in[0..n).
void launch_accumulate(StreamView stream, const int* in, std::size_t n, unsigned long long* total);

}  // namespace sluice::test
