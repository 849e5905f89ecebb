#include "core/event_poll.hpp"

#include <chrono>
#include <thread>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

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

void shorten_timer_slack() {
#if defined(__linux__)
  (void)prctl(PR_SET_TIMERSLACK, 1000UL);  // nanoseconds; a failure leaves the default, which is only slower
#endif
}

}  // namespace sluice::detail
