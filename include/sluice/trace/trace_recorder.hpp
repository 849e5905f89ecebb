#pragma once
// Records stage intervals of any stream work - a hand-written loop, a demo, a
// peer in the benchmark - with a pair of timing events around each piece, all
// measured from one origin event, so they share a time base with the
// pipeline's own recording.
#include <deque>
#include <vector>

#include "sluice/core/event.hpp"
#include "sluice/core/stream_view.hpp"
#include "sluice/trace/stage_interval.hpp"

namespace sluice {

class TraceRecorder {
 public:
  // Time zero is now, in `origin`'s order: give a stream with no pending work.
  explicit TraceRecorder(StreamView origin);

  // Times what `enqueue` puts on `stream` as one interval.
  template <typename Enqueue>
  void record(StreamView stream, Lane lane, std::size_t chunk, std::size_t bytes, int stream_index, Enqueue&& enqueue) {
    Mark& mark = marks_.emplace_back(lane, chunk, bytes, stream_index);
    mark.start.record(stream);
    enqueue();
    mark.stop.record(stream);
  }

  // The same in two calls, for work not enqueued by one call of its own
  // (NCCL's grouped calls enqueue at ncclGroupEnd): start() before, stop() after.
  std::size_t start(StreamView stream, Lane lane, std::size_t chunk, std::size_t bytes, int stream_index) {
    marks_.emplace_back(lane, chunk, bytes, stream_index).start.record(stream);
    return marks_.size() - 1;
  }
  void stop(std::size_t mark, StreamView stream) { marks_[mark].stop.record(stream); }

  // Waits for the recorded work and returns its intervals, in ms from time zero.
  std::vector<StageInterval> intervals() const;

 private:
  struct Mark {
    Mark(Lane l, std::size_t c, std::size_t b, int s)
        : start(Event::Timing::enabled), stop(Event::Timing::enabled), lane(l), chunk(c), bytes(b), stream(s) {}
    Event start, stop;
    Lane lane;
    std::size_t chunk, bytes;
    int stream;
  };
  Event origin_{Event::Timing::enabled};
  std::deque<Mark> marks_;  // a deque keeps each Mark in place as more are added
};

// Records through `recorder` when there is one, else just enqueues.
template <typename Enqueue>
void maybe_record(TraceRecorder* recorder, StreamView stream, Lane lane, std::size_t chunk, std::size_t bytes,
                  int stream_index, Enqueue&& enqueue) {
  if (recorder)
    recorder->record(stream, lane, chunk, bytes, stream_index, enqueue);
  else
    enqueue();
}

}  // namespace sluice
