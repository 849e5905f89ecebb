#pragma once
// Keeps the order of calls to a source or sink that is not splittable: the
// call for chunk c waits until the one for chunk c - 1 has returned.
// Host-only.
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace sluice::detail {

class ChunkGate {
 public:
  void reset(std::size_t first);
  // Throws std::runtime_error when the gate was closed by a failure.
  void enter(std::size_t chunk);
  void leave();
  void close();

 private:
  std::mutex mutex_;
  std::condition_variable turn_;
  std::size_t next_ = 0;
  bool closed_ = false;
};

}  // namespace sluice::detail
