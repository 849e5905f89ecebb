#pragma once
// The ways people write copy-in/compute/copy-out by hand, as honestly as a
// careful user would, to run beside sluice's pipeline on the same data.
// Each run() does the whole job and returns once the output is in host memory;
// with a recorder, each copy and kernel becomes an interval of its timeline.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "sluice/core/device_buffer.hpp"
#include "sluice/core/event.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/trace/trace_recorder.hpp"
#include "workload.hpp"

namespace sluice::workloads {

class Peer {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~Peer() = default;
  virtual std::string name() const = 0;
  virtual void run(Problem& problem, TraceRecorder* recorder = nullptr) = 0;
  // When the last run had enqueued all its work and began to wait for it:
  // what its host cost per chunk is measured to (run_overhead.hpp).
  Clock::time_point enqueued() const { return enqueued_; }

 protected:
  void mark_enqueued() { enqueued_ = Clock::now(); }

 private:
  Clock::time_point enqueued_{};
};

// cudaMemcpy -> kernel -> cudaMemcpy on the legacy default stream: nothing overlaps.
std::unique_ptr<Peer> make_synchronous(const Problem& problem);

// The "staircase": the data split into `streams` slices, each stream doing
// H2D -> kernel -> D2H of its slice; overlap comes from the streams' slices.
std::unique_ptr<Peer> make_staircase(const Problem& problem, unsigned streams);

// Three streams (H2D, compute, D2H) over a ring of three device slots,
// joined by cudaEventRecord / cudaStreamWaitEvent.
std::unique_ptr<Peer> make_triple_buffer(const Problem& problem, std::size_t chunk_items);

}  // namespace sluice::workloads
