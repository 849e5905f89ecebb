#pragma once
// Waiting for an event by asking, not by sleeping in the driver.
//
// A thread blocked in cudaEventSynchronize on a blocking-sync event is woken
// by an interrupt, and the streams pay for it: on the H200 a chunked copy-
// bound pipeline ran its D2H copies 11 us apart while the host blocked on
// each chunk, and took 2-3 % longer than the same pipeline polling. So the
// pipeline polls: it queries the event and sleeps a few microseconds between
// queries, or only yields where it must wake at once.
#include <cuda_runtime_api.h>

namespace sluice::detail {

enum class PollPause {
  sleep,  // ~20 us between queries: costs almost no CPU, wakes a little late
  yield,  // only yields the core: wakes within microseconds, for the end of a run
};

// cudaSuccess once the event's work is complete, or the error the query gave.
cudaError_t poll_event(cudaEvent_t event, PollPause pause);

}  // namespace sluice::detail
