// The demos in the order `sluice demo` runs them: from why pinned memory
// matters, through streams and events, to what the hardware allows.
#include "demo.hpp"

namespace sluice::demo {

DemoResult run_pinned_vs_pageable(const DemoOptions&);
DemoResult run_sync_vs_streams(const DemoOptions&);
DemoResult run_triple_buffer(const DemoOptions&);
DemoResult run_events(const DemoOptions&);
DemoResult run_concurrent_kernels(const DemoOptions&);
DemoResult run_priorities(const DemoOptions&);
DemoResult run_callbacks(const DemoOptions&);
DemoResult run_default_stream(const DemoOptions&);
DemoResult run_unified_memory(const DemoOptions&);
DemoResult run_copy_engines(const DemoOptions&);
DemoResult run_prefetch(const DemoOptions&);
DemoResult run_nccl_overlap(const DemoOptions&);
DemoResult run_pipeline_parallel(const DemoOptions&);

const std::vector<DemoInfo>& all_demos() {
  static const std::vector<DemoInfo> demos{
      {"pinned-vs-pageable", "why pinned memory?", run_pinned_vs_pageable},
      {"sync-vs-streams", "what do streams buy over one synchronous stream?", run_sync_vs_streams},
      {"triple-buffer", "can three streams and events reach the bound?", run_triple_buffer},
      {"events", "how do you time GPU work, and order it across streams?", run_events},
      {"concurrent-kernels", "how many small kernels run at once?", run_concurrent_kernels},
      {"priorities", "can urgent kernels jump the queue of a busy GPU?", run_priorities},
      {"callbacks", "how does the GPU tell the host a batch is done?", run_callbacks},
      {"default-stream", "what does the legacy default stream, or cudaFree, do to overlap?", run_default_stream},
      {"unified-memory", "what does managed memory cost, with and without prefetch?", run_unified_memory},
      {"copy-engines", "do H2D and D2H run at the same time?", run_copy_engines},
      {"prefetch", "can a training step start the moment the last one ends?", run_prefetch},
      {"nccl-overlap", "can the gradient all-reduce hide behind the backward pass?", run_nccl_overlap},
      {"pipeline-parallel", "do micro-batches keep every stage of a model split across GPUs busy?",
       run_pipeline_parallel},
  };
  return demos;
}

}  // namespace sluice::demo
