#pragma once
// Small kernels the GPU tests use to hold a stream busy and to mark order.
#include "sluice/stream_view.hpp"

namespace sluice::test {

// Busy-waits about `microseconds` on the device, then writes `value` to *flag.
void launch_spin_then_write(StreamView stream, double microseconds, int* flag, int value);
// Copies *from into *to (one thread): reads what earlier work wrote.
void launch_copy_word(StreamView stream, const int* from, int* to);
// Writes out[i] = i * scale + offset for i < n.
void launch_iota(StreamView stream, float* out, std::size_t n, float scale, float offset);

}  // namespace sluice::test
