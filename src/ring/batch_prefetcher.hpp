#pragma once
// A prefetcher for batches of any shape: a producer hands it each batch as
// host pieces (the leaves of a dict of tensors, say), and the consumer takes
// it as one block of device memory, the pieces at aligned offsets, ready on
// its stream. It is a ring (ring.hpp) of unbounded length fed by the
// caller's producer. Host-only: it runs on any RingExecutor, a GPU's or the
// host executor that CI tests it with.
//
//   producer thread                      consumer (the training loop)
//   for batch in source:                 while (auto b = p.next(stream)) {
//     p.put(pieces of batch);              step(b->data + b->offsets[k] ...);
//   p.close();                           }
//
// Pageable pieces are copied into the ring's page-locked staging slot by the
// staging threads in parallel, before put() returns; page-locked pieces are
// read by the copy itself, and the producer keeps them until copied(). Slots
// start small and grow to the largest batch seen. The consumer holds the
// batches of its last `held` next() calls; a batch it must keep longer
// (a tensor of it stored past the step) is kept with keep(), and its slot
// gets other memory.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/staging_pool.hpp"
#include "ring/block_layout.hpp"
#include "ring/ring.hpp"
#include "sluice/loader/batch_prefetch_options.hpp"

namespace sluice::ring {

// The product's own options (sluice/loader/batch_prefetcher.hpp), where its
// defaults are written; `device` is the executor's business here.
using PrefetchOptions = BatchPrefetchOptions;

class BatchPrefetcher {
 public:
  // Throws std::invalid_argument for ahead outside 1 .. most_ahead, held or staging 0, or an align that is not a power of two.
  BatchPrefetcher(RingExecutor& executor, PrefetchOptions options);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // Producer: one batch, after the consumer has taken all but `ahead` of
  // those before it; returns its position. Throws std::logic_error once
  // stopped (the producer ends there) and a RingError where staging failed.
  std::size_t put(std::span<const HostPiece> pieces);
  void close();
  void fail(const std::string& what);
  bool copied(std::size_t position) const { return ring_.copied(position); }

  struct Batch {
    std::size_t position = 0;
    std::byte* data = nullptr;  // the block on the device
    std::vector<std::size_t> offsets;
    std::size_t bytes = 0;
    std::shared_ptr<void> memory;  // holds the block past the batch's release, once kept
  };
  // Consumer: the next batch, ready on `lane` (its stream); nullopt after the
  // last. Throws RingError where the producer failed at this batch.
  std::optional<Batch> next(ConsumerLane lane = {});
  bool ready_within(std::chrono::milliseconds timeout) { return ring_.ready_within(timeout); }
  // The batch at `position`, which the consumer holds, stays where it is past its release.
  void keep(std::size_t position) { ring_.detach(position); }
  // Ends early: nothing runs once it returns; a producer in put() gets a std::logic_error.
  void stop() noexcept { ring_.stop(); }

 private:
  RingPlan plan(const PrefetchOptions& options);

  PrefetchOptions options_;
  StagingPool staging_;
  Ring ring_;
  std::mutex mutex_;
  std::map<std::size_t, std::vector<std::size_t>> offsets_;  // of batches put and not yet taken
};

}  // namespace sluice::ring
