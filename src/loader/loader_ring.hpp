#pragma once
// The engine under TokenLoader and RecordLoader: the batches of a BatchPlan,
// from a saved state on, handed to the consumer through a ring
// (ring/ring.hpp) on any RingExecutor: the CUDA one under the loaders, the
// host one in tests. Host-only.
//
// Ring position p is the p-th batch from the state the loader starts at; the
// ring is unbounded (epoch after epoch), `ahead` positions ahead of the
// consumer, held 1 (a batch stays valid until the next next()). Its own
// producer walks the batch plan:
//
//   bytes      the batch's rows x row_bytes: the last batch of an epoch may be short
//   stage      the rows read into a staging slot by the reader threads (read_row,
//              pread), or by the producer's thread where the batch is one piece
//   copy       the rows to the device slot, on the copy lane
//   transform  where out_row_bytes > 0: raw rows -> output rows in the slot, on the copy lane
//   ready / take / release   as every ring: on a GPU, one event and at most
//              one wait per batch on the consumer's stream (cuda_ring_executor.hpp)
//
// A failed read fails its batch: next() of it rethrows what read_row threw
// (the loaders' ShardError or IoError, naming the file and offset).
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "core/staging_pool.hpp"
#include "ring/ring.hpp"
#include "sluice/loader/batch_plan.hpp"
#include "sluice/loader/prefetcher.hpp"

namespace sluice::detail {

struct LoaderSource {
  std::size_t row_bytes = 0;      // bytes of one row as read (a staging slot holds batch x this)
  std::size_t out_row_bytes = 0;  // bytes of one row after the transform; 0: no transform
  // Reads one row (an item of the plan) into `row`. Called on reader threads; throws to fail the batch.
  std::function<void(std::size_t item, std::byte* row)> read_row;
  // On the copy lane (`lane`: ring::Transform's): `rows` raw rows -> output
  // rows; `out` holds a full batch of output rows.
  std::function<void(void* lane, const std::byte* raw, std::byte* out, std::size_t rows)> transform;
};

class LoaderRing {
 public:
  // The ring the loader runs: for the loaders' memory checks before any
  // work. Throws std::invalid_argument for `ahead` outside 1 .. most_ahead.
  static ring::RingOptions ring_options(const BatchPlan& plan, const LoaderSource& source, std::size_t ahead);
  // Rows a reader reads at once (at least 64 KiB of them); a batch of one
  // piece is read on the producer's thread, waking no reader.
  static std::size_t rows_per_piece(std::size_t rows, std::size_t row_bytes, std::size_t readers);

  // Starts at options.start (BatchPlan::resume_at), with options.ahead and
  // options.threads; `executor` outlives the loader ring.
  LoaderRing(BatchPlan plan, LoaderSource source, ring::RingExecutor& executor, const LoaderOptions& options);
  ~LoaderRing();  // nothing of the ring runs once it returns
  LoaderRing(const LoaderRing&) = delete;
  LoaderRing& operator=(const LoaderRing&) = delete;

  struct Taken {
    const std::byte* data = nullptr;  // the batch on the device (output rows, or raw rows), until the next next()
    std::size_t rows = 0;
    LoaderState position;
    bool last_of_epoch = false;
  };
  // The next batch, once the consumer's lane waits for it. Throws what its read threw.
  Taken next(ring::ConsumerLane lane = {});
  LoaderState state() const;  // where the next batch starts
  IdleReport idle() const;
  const BatchPlan& plan() const { return plan_; }
  const ring::RingPlan& ring_plan() const { return ring_->plan(); }

 private:
  std::size_t batch_bytes(std::size_t position);                 // the producer's thread, in order
  void read_batch(std::size_t position, std::span<std::byte> slot);  // the staging lane

  BatchPlan plan_;
  LoaderSource source_;
  StagingPool readers_;
  mutable std::mutex mutex_;
  LoaderState producing_;                       // the producer's next batch
  std::map<std::size_t, LoaderState> planned_;  // positions sized and not yet read
  LoaderState next_state_;                      // the consumer's next batch
  std::unique_ptr<ring::Ring> ring_;            // last: stopped first, while what its producer uses exists
};

}  // namespace sluice::detail
