#pragma once
// `sluice bench --multi-gpu`: what several GPUs on one host allow. First the
// links: each GPU's copy rate alone and all GPUs copying at once (equal sums:
// independent links; less: a shared switch or host memory). Then one
// MultiPipeline over every GPU against the same over GPU 0 alone, on a
// compute-bound and a copy-bound workload, and with pageable input (where
// host memory, staging for every GPU at once, sets the pace).
#include <functional>
#include <string>

namespace sluice::bench {

struct MultiGpuBenchOptions {
  std::size_t bytes = std::size_t{1} << 30;  // per array
  int repeats = 3;
};

// Runs everything and returns the report as text; says why when there is
// only one GPU.
std::string run_multi_gpu_bench(const MultiGpuBenchOptions& options,
                                const std::function<void(const std::string&)>& progress);

}  // namespace sluice::bench
