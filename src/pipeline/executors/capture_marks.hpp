#pragma once
// A timed capture's marks: a timing event before and after every stage of
// every chunk of a replayed run that learns its chunks
// (PipelineOptions::adapt_chunks). Each mark is an event of its own: a
// graph's nodes may record in any order their edges allow, and every mark
// is read once the replay is done. Captured as event record nodes, they
// are recorded each time the graph runs.
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "sluice/core/error.hpp"
#include "sluice/core/event.hpp"

namespace sluice::detail {

enum class MarkEnd { start, end };

class CaptureMarks {
 public:
  static constexpr std::size_t lanes = 3;  // h2d, compute, d2h

  // Marks for `chunks` chunks at least, made on the current device.
  void reserve(std::size_t chunks) {
    while (events_.size() < chunks * lanes * ends) events_.emplace_back(Event::Timing::enabled);
  }
  Event& at(std::size_t chunk, std::size_t lane, MarkEnd end) {
    return events_[(chunk * lanes + lane) * ends + (end == MarkEnd::end ? 1 : 0)];
  }
  // Into the capture under way on `stream`, as an event record node.
  void record(std::size_t chunk, std::size_t lane, MarkEnd end, cudaStream_t stream) {
    SLUICE_CUDA_CHECK(cudaEventRecordWithFlags(at(chunk, lane, end).get(), stream, cudaEventRecordExternal));
  }

 private:
  static constexpr std::size_t ends = 2;
  std::vector<Event> events_;
};

}  // namespace sluice::detail
