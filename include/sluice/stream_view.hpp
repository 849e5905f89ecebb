#pragma once
// A non-owning handle to a CUDA stream: what functions take as a parameter,
// so ownership never travels by accident. Trivially copyable.
#include <cuda_runtime_api.h>

namespace sluice {

class Event;

class StreamView {
 public:
  // The per-thread default stream: never the legacy default stream, whose
  // implicit synchronisation defeats overlap.
  constexpr StreamView() noexcept = default;
  constexpr explicit StreamView(cudaStream_t stream) noexcept : stream_(stream) {}

  constexpr cudaStream_t get() const noexcept { return stream_; }
  constexpr operator cudaStream_t() const noexcept { return stream_; }

  // Blocks until the stream's work is done; rethrows the first exception a
  // host function (enqueue_host) raised on this stream.
  void synchronize() const;
  // True when all work so far has finished (does not block).
  bool ready() const;
  // Later work on this stream waits until `event` has completed.
  void wait(const Event& event) const;
  int priority() const;

  friend constexpr bool operator==(StreamView a, StreamView b) noexcept { return a.stream_ == b.stream_; }

 private:
  cudaStream_t stream_ = cudaStreamPerThread;
};

}  // namespace sluice
