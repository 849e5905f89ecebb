#pragma once
// NaN in every element, so that an element nobody wrote cannot pass a check;
// several threads where the span is large (one thread writes about 10 GB/s on
// the H200's host: 0.4 s a run at 4 GiB). Host code, kept out of the CUDA
// sources.
#include <span>

namespace sluice::workloads {

void fill_with_nan(std::span<float> out);

}  // namespace sluice::workloads
