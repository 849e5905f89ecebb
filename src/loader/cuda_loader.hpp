#pragma once
// The loaders' engine on a GPU: the loader ring (loader_ring.hpp) on the
// CUDA ring executor, with a copy stream at the device's lowest priority,
// after the checks that refuse, before any work, batches that do not fit
// the device's free memory or would pin over half the host's.
#include <memory>

#include "loader/loader_ring.hpp"
#include "ring/cuda_ring_executor.hpp"
#include "sluice/core/stream_view.hpp"

namespace sluice::detail {

class CudaLoader {
 public:
  CudaLoader(BatchPlan plan, LoaderSource source, const LoaderOptions& options);
  // Waits for the loader's own copies and nothing else: the device memory of
  // the last batch is freed in the order of the stream that took it.
  ~CudaLoader();
  CudaLoader(const CudaLoader&) = delete;
  CudaLoader& operator=(const CudaLoader&) = delete;

  LoaderRing::Taken next(StreamView consumer) { return ring_->next({consumer.get()}); }
  LoaderState state() const { return ring_->state(); }
  IdleReport idle() const { return ring_->idle(); }
  const BatchPlan& plan() const { return ring_->plan(); }

 private:
  std::unique_ptr<ring::CudaRingExecutor> executor_;
  std::unique_ptr<LoaderRing> ring_;  // after the executor: stopped before it goes
};

}  // namespace sluice::detail
