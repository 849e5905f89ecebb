#pragma once
// What the host can do for a staged run, under the run's own conditions:
// the staging threads copy every input byte into a pinned slot ring and the
// ring into the output, both directions at once, with the stores a staged
// run uses (memcpy in, streaming stores out) in pieces of a staged chunk's
// size, and no GPU work at all. Timed as a row, in the same rounds as the
// staged row, so its output has just been poisoned too. The bound's host
// terms are measured on scratch memory or with the output clean; where this
// takes longer than they allow, a staged run cannot reach them.
#include <memory>

#include "core/staging_pool.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "workload.hpp"

namespace sluice::bench {

class HostAlone {
 public:
  HostAlone(workloads::Problem& problem, StagingPool& pool);
  // One pass over the problem's arrays; returns when every byte is copied.
  void run();

 private:
  workloads::Problem& problem_;
  StagingPool& pool_;
  PinnedBuffer<std::byte> ring_in_, ring_out_;
};

}  // namespace sluice::bench
