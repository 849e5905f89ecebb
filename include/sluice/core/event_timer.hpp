#pragma once
// Time stream work the way sluice reports it: warm-up runs first, then each
// repeat bracketed by timing events in the same stream; one sample per repeat.
#include <vector>

#include "sluice/core/event.hpp"
#include "sluice/core/stream_view.hpp"

namespace sluice {

// `work(stream)` enqueues the work to time; it may also block the host (a
// pageable cudaMemcpyAsync does), which the events then include.
template <typename Work>
std::vector<double> time_with_events(StreamView stream, int warmup, int repeats, Work&& work) {
  Event start(Event::Timing::enabled), stop(Event::Timing::enabled);
  for (int i = 0; i < warmup; ++i) work(stream);
  stream.synchronize();
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(repeats));
  for (int i = 0; i < repeats; ++i) {
    start.record(stream);
    work(stream);
    stop.record(stream);
    stop.synchronize();
    samples.push_back(elapsed_ms(start, stop));
  }
  stream.synchronize();
  return samples;
}

}  // namespace sluice
