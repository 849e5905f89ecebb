#pragma once
// The machinery under TokenLoader and RecordLoader: a ring of `ahead + 1`
// slots, each a pinned host buffer, a raw device buffer and (with a
// transform) an output device buffer, filled by one producer thread:
//
//   for batch i (slot i % slots):
//     wait until the consumer has taken batch i - ahead       (host: how far ahead)
//     wait for the H2D that last read this pinned slot       (host, on the producer thread)
//     read the batch's rows into the slot on the reader pool (pread)
//     copy stream: wait for the slot's release by the consumer's stream (GPU side),
//                  H2D, transform, record `ready`
//
// The consumer's stream does as little as it can per batch, since at a
// 0.2 ms step every operation on it shows as idle: next() records one event,
// `taken` (where the stream reached batch i: the release of batch i - 1 and
// the start of batch i's wait), and waits on the batch's `ready` unless it
// has already happened.
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/staging_pool.hpp"
#include "sluice/core/device_buffer.hpp"
#include "sluice/core/event.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream.hpp"
#include "sluice/loader/batch_plan.hpp"
#include "sluice/loader/prefetcher.hpp"

namespace sluice::detail {

struct PrefetchSpec {
  std::size_t row_bytes = 0;         // host bytes of one row (pinned slot: rows x this)
  std::size_t out_row_bytes = 0;     // device bytes of one row after the transform; 0: no transform
  // Reads one row (an item of the plan) into `row`. Called on reader threads; throws to fail the batch.
  std::function<void(std::size_t item, std::byte* row)> read_row;
  // On the copy stream: raw rows -> output rows.
  std::function<void(StreamView stream, const std::byte* raw, std::byte* out, std::size_t rows)> transform;
};

class PrefetchEngine {
 public:
  PrefetchEngine(BatchPlan plan, PrefetchSpec spec, const LoaderOptions& options);
  // Waits for the loader's own copies and nothing else: the device memory of
  // the last batch is freed in the order of the stream that took it.
  ~PrefetchEngine();
  PrefetchEngine(const PrefetchEngine&) = delete;
  PrefetchEngine& operator=(const PrefetchEngine&) = delete;

  struct Taken {
    const std::byte* data = nullptr;  // device memory of the batch (output rows, or raw rows)
    std::size_t rows = 0;
    LoaderState position;
    bool last_of_epoch = false;
  };
  Taken next(StreamView consumer);
  LoaderState state() const;
  IdleReport idle() const;
  const BatchPlan& plan() const { return plan_; }

 private:
  void produce() noexcept;
  void harvest_idle(std::size_t batch) const;
  void release_memory() noexcept;

  BatchPlan plan_;
  PrefetchSpec spec_;
  std::size_t ahead_;
  std::size_t slots_;
  int device_ = 0;
  Stream copy_;
  StagingPool readers_;
  std::vector<PinnedBuffer<std::byte>> pinned_;
  std::vector<DeviceBuffer<std::byte>> raw_, out_;
  std::vector<Event> h2d_done_;  // per slot: the H2D that read the pinned slot is done

  // Batch i's `ready` (copy stream) and `taken` (consumer stream) sit at
  // i % ring, timing enabled: their difference is how long the consumer's
  // stream waited. A pair is summed before its place is reused, on the
  // producer thread (or in idle()). The ring is far longer than the slots,
  // so a slot's release (taken of the batch after it) is still in place
  // when the producer needs it.
  static constexpr std::size_t ring = 256;
  std::vector<Event> ready_, taken_events_;
  Event loop_start_;  // where the consumer's stream took the second batch (made on the loader's device)
  std::optional<StreamView> consumer_;  // the stream of the last next(): where the last batch is read
  mutable std::mutex idle_mutex_;
  mutable std::size_t harvested_ = 0;  // batches whose wait is summed
  mutable double waited_ms_ = 0;  // batches 1 on
  mutable double fill_ms_ = 0;    // batch 0

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  LoaderState next_state_;       // the position of the next batch to take
  std::size_t produced_ = 0;     // batches with `ready` recorded
  std::size_t taken_ = 0;        // batches returned by next()
  std::size_t failed_at_ = SIZE_MAX;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread producer_;  // last: starts when everything above exists
};

}  // namespace sluice::detail
