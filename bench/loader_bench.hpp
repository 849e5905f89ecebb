#pragma once
// `sluice bench --loader`: the training prefetcher's throughput with no step
// (against the storage and link bound), and how long the GPU waits for data
// at step costs from 0.2 ms to 20 ms, beside loading each batch on demand and
// a PyTorch DataLoader written as a careful user writes it.
#include <functional>
#include <string>
#include <vector>

namespace sluice::bench {

struct LoaderBenchOptions {
  std::string dir = ".";
  std::size_t tokens = std::size_t{512} << 20;  // 1 GiB of uint16 tokens
  std::size_t batch = 64;
  std::size_t seq = 1024;
  std::size_t steps = 200;
  std::vector<double> step_ms{0.2, 1, 5, 20};
  std::string torch_peer;  // bench/torch_loader_peer.py; empty: no PyTorch rows
  std::string python = "python3";
};

// Runs everything and returns the report as text.
std::string run_loader_bench(const LoaderBenchOptions& options, const std::function<void(const std::string&)>& progress);

}  // namespace sluice::bench
