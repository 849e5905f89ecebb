#pragma once
// An owning CUDA event: a marker in a stream's order, used to time work and
// to make one stream wait for another without blocking the host. Move-only.
#include <cuda_runtime_api.h>

#include "sluice/core/stream_view.hpp"

namespace sluice {

class Event {
 public:
  // Timing costs a little at every record; leave it off for pure dependencies.
  enum class Timing { disabled, enabled };
  // How synchronize() waits: spinning wakes within microseconds but keeps a
  // core busy; blocking sleeps in the driver and wakes ~50 us late (measured
  // on the test host), leaving the core to other threads.
  enum class Wait { spin, block };

  explicit Event(Timing timing = Timing::disabled, Wait wait = Wait::spin);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(StreamView stream);
  void synchronize() const;
  // True once the work before the last record() has completed.
  bool ready() const;
  bool timing_enabled() const noexcept { return timing_ == Timing::enabled; }
  cudaEvent_t get() const noexcept { return event_; }

 private:
  void release() noexcept;
  cudaEvent_t event_ = nullptr;
  Timing timing_ = Timing::disabled;
};

// Milliseconds between two completed, timing-enabled events (about 0.5 us
// resolution). Throws std::invalid_argument if either has timing disabled.
float elapsed_ms(const Event& start, const Event& stop);

}  // namespace sluice
