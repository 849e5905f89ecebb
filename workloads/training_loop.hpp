#pragma once
// A training loop over token shards, run the ways people feed a GPU, each
// verified batch by batch: the loading the demo and the loader bench share.
//   synchronous   llm.c's way: read each batch on the host, cudaMemcpy it from
//                 pageable memory, widen it, then step; nothing overlaps
//   prefetcher    sluice::TokenLoader, `ahead` batches in flight
// The step is a kernel of set cost that checksums its batch; the checksums
// are compared with the file's tokens at the planned windows.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sluice/loader/prefetcher.hpp"
#include "sluice/trace/trace.hpp"

namespace sluice::workloads {

struct TrainingShape {
  std::size_t batch = 16;
  std::size_t seq = 1024;
  std::size_t steps = 50;
  double step_ms = 2.0;  // the step kernel's cost; 0 for none (the loader alone)
  bool shuffle = true;
  std::uint64_t seed = 1;
};

struct LoopResult {
  std::string method;
  std::size_t steps = 0;
  double ms = 0;                // the loop's wall time, first step to the last one finished
  double tokens_per_s = 0;      // input tokens served
  double gpu_idle = 0;          // 1 - baseline / wall: the loop's time beyond the same steps with no loading
  std::optional<IdleReport> loader_idle;  // the prefetcher's own event measure
  double cpu_ms_per_batch = 0;  // the process's user + system time over the loop, per batch
  bool verified = false;
  std::string detail;
  Trace trace;                  // the step kernels on the consumer's stream
};

// Writes `shards` uint16 shards with `tokens` tokens in all into `dir`;
// returns their glob pattern. Token values depend on shard and position.
std::string make_token_shards(const std::string& dir, std::size_t tokens, std::size_t shards);

// The steps alone, back to back on one stream over a batch already on the
// device, launched as the loops launch them: the time a loop would take if
// loading cost nothing. Its GPU idle is measured against this.
double steps_alone_ms(const TrainingShape& shape);

// baseline_ms: steps_alone_ms(shape), measured once and shared; 0 measures it here.
LoopResult synchronous_loop(const std::string& pattern, const TrainingShape& shape, double baseline_ms = 0);
LoopResult prefetch_loop(const std::string& pattern, const TrainingShape& shape, std::size_t ahead, double baseline_ms = 0);

}  // namespace sluice::workloads
