#include "sluice/trace/trace_recorder.hpp"

namespace sluice {

TraceRecorder::TraceRecorder(StreamView origin) { origin_.record(origin); }

std::vector<StageInterval> TraceRecorder::intervals() const {
  std::vector<StageInterval> out;
  out.reserve(marks_.size());
  for (const auto& m : marks_) {
    m.stop.synchronize();
    out.push_back({m.lane, m.chunk, elapsed_ms(origin_, m.start), elapsed_ms(origin_, m.stop), m.bytes, m.stream});
  }
  return out;
}

}  // namespace sluice
