#pragma once
// An owning CUDA stream. Non-blocking by default: it never synchronises
// implicitly with the legacy default stream. Move-only.
#include <cuda_runtime_api.h>

#include "sluice/core/stream_view.hpp"

namespace sluice {

enum class StreamFlags { non_blocking, blocking };

class Stream {
 public:
  // priority follows CUDA: lower numbers are more urgent, 0 is the default.
  // Throws std::invalid_argument for a priority outside the current device's
  // range (CUDA itself would clamp it silently).
  explicit Stream(int priority = 0, StreamFlags flags = StreamFlags::non_blocking);
  // Work already enqueued still runs. Waits while host functions (enqueue_host)
  // are still queued on it, so that an exception one raises is reported then
  // (on stderr, when nobody collected it).
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  StreamView view() const noexcept { return StreamView(stream_); }
  operator StreamView() const noexcept { return view(); }
  cudaStream_t get() const noexcept { return stream_; }
  int priority() const noexcept { return priority_; }

  void synchronize() const { view().synchronize(); }
  bool ready() const { return view().ready(); }
  void wait(const Event& event) const { view().wait(event); }

 private:
  void release() noexcept;
  cudaStream_t stream_ = nullptr;
  int priority_ = 0;
};

}  // namespace sluice
