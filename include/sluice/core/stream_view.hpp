#pragma once
// A non-owning handle to a CUDA stream: what functions take as a parameter,
// so ownership never travels by accident. Trivially copyable. The header
// needs no CUDA header (a cudaStream_t is a CUstream_st*), so host-only code
// can carry a chunk's stream; its member functions are in the CUDA library.
#include <cstdint>

struct CUstream_st;

namespace sluice {

class Event;

class StreamView {
 public:
  // The per-thread default stream (cudaStreamPerThread): never the legacy
  // default stream, whose implicit synchronisation defeats overlap.
  StreamView() noexcept = default;
  explicit StreamView(CUstream_st* stream) noexcept : handle_(reinterpret_cast<std::uintptr_t>(stream)) {}

  CUstream_st* get() const noexcept { return reinterpret_cast<CUstream_st*>(handle_); }
  operator CUstream_st*() const noexcept { return get(); }

  // Blocks until the stream's work is done; rethrows the first exception a
  // host function (enqueue_host) raised on this stream.
  void synchronize() const;
  // True when all work so far has finished (does not block).
  bool ready() const;
  // Later work on this stream waits until `event` has completed.
  void wait(const Event& event) const;
  int priority() const;

  friend bool operator==(StreamView a, StreamView b) noexcept { return a.handle_ == b.handle_; }

 private:
  static constexpr std::uintptr_t per_thread_stream = 0x2;  // cudaStreamPerThread; stream.cpp checks it
  std::uintptr_t handle_ = per_thread_stream;
};

}  // namespace sluice
