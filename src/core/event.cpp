#include "sluice/core/event.hpp"

#include <stdexcept>
#include <utility>

#include "sluice/core/error.hpp"

namespace sluice {

Event::Event(Timing timing, Wait wait) : timing_(timing) {
  unsigned flags = timing == Timing::enabled ? cudaEventDefault : cudaEventDisableTiming;
  if (wait == Wait::block) flags |= cudaEventBlockingSync;
  SLUICE_CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags));
}

Event::~Event() { release(); }

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)), timing_(other.timing_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    release();
    event_ = std::exchange(other.event_, nullptr);
    timing_ = other.timing_;
  }
  return *this;
}

void Event::release() noexcept {
  if (event_ != nullptr) SLUICE_CUDA_CHECK_NOTHROW(cudaEventDestroy(event_));
  event_ = nullptr;
}

void Event::record(StreamView stream) { SLUICE_CUDA_CHECK(cudaEventRecord(event_, stream.get())); }

void Event::synchronize() const { SLUICE_CUDA_CHECK(cudaEventSynchronize(event_)); }

bool Event::ready() const {
  const cudaError_t code = cudaEventQuery(event_);
  if (code == cudaErrorNotReady) return false;
  SLUICE_CUDA_CHECK(code);
  return true;
}

float elapsed_ms(const Event& start, const Event& stop) {
  if (!start.timing_enabled() || !stop.timing_enabled())
    throw std::invalid_argument("elapsed_ms needs two events created with Event::Timing::enabled");
  float ms = 0;
  SLUICE_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

}  // namespace sluice
