#include "core/event_poll.hpp"

#include <chrono>
#include <thread>

namespace sluice::detail {

cudaError_t poll_event(cudaEvent_t event, PollPause pause) {
  for (;;) {
    const cudaError_t code = cudaEventQuery(event);
    if (code != cudaErrorNotReady) return code;
    if (pause == PollPause::sleep)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    else
      std::this_thread::yield();
  }
}

}  // namespace sluice::detail
