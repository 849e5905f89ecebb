#pragma once
// Batches of any shape on the GPU before the loop asks for them, from a
// producer of the caller's: what Python's sluice.Prefetcher does, for C++.
//
//   sluice::BatchPrefetcher p({.ahead = 2});
//   std::jthread producer([&] {             // one thread puts; another takes
//     try {
//       for (auto [images, labels] : samples)  // std::span<const float> each
//         p.put(std::array{sluice::BatchPiece{images.data(), images.size_bytes()},
//                          sluice::BatchPiece{labels.data(), labels.size_bytes()}});
//       p.close();
//     } catch (const std::invalid_argument& e) {  // a bad piece (also a logic_error)
//       p.fail(e.what());
//     } catch (const std::logic_error&) {    // the consumer stopped
//     } catch (const std::exception& e) {
//       p.fail(e.what());                    // next() throws BatchError at that batch
//     }
//   });
//   struct Stop { sluice::BatchPrefetcher& p; ~Stop() { p.stop(); } } stop{p};  // before the join, however the loop ends
//   while (auto b = p.next(step_stream)) {  // step_stream waits for the batch; the host does not
//     auto* images = reinterpret_cast<const float*>(b->data + b->offsets[0]);
//     step<<<..., step_stream>>>(images, ...);
//   }
//
// A batch is a list of host pieces; it reaches the device as one block, each
// piece at an offset aligned to `align`. Pageable pieces are copied by
// `threads` staging threads in parallel into page-locked staging slots
// before put() returns; page-locked pieces are read where they lie by the
// copy, so the producer keeps them alive until copied(position). The copies
// run on a copy stream of the prefetcher's, and next() makes the consumer's
// stream wait on the batch's event: the consumer's stream waits on the GPU,
// the host never does (except for a batch the producer has not put yet).
// Staging slots and device slots grow to the largest batch seen.
//
// A batch's block stays valid on the consumer's stream until `held` more
// next() calls: the slot is refilled only after the consumer's stream has
// passed that point. A batch needed longer (a tensor of it stored past the
// step) is kept with keep(): its block then lives as long as a copy of its
// DeviceBatch::memory does, and its slot gets other memory.
//
// The producer is bounded: put() waits while `ahead` batches are put beyond
// the ones the consumer holds. Stop the prefetcher and join the producer
// before destroying it (destroying one a producer is still inside is
// undefined). A kept block is freed in the order of the stream that took it,
// on the thread that lets it go: with the per-thread default stream
// (StreamView()) as the consumer, let it go on the consumer's thread, with
// the prefetcher's device current.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "sluice/core/stream_view.hpp"
#include "sluice/loader/batch_prefetch_options.hpp"

namespace sluice {

struct BatchPiece {
  const void* data = nullptr;
  std::size_t bytes = 0;
  bool page_locked = false;  // copied where it lies, with no staging: kept alive until copied()
  // A pageable piece that a file also holds at fd_offset (shared memory from
  // another process, a memfd): staging reads it with pread instead of through
  // `data`, so this process never touches (faults in) its pages. `data` is
  // still required, and the file must stay open until put() returns.
  // -1: read through `data`.
  int fd = -1;
  std::uint64_t fd_offset = 0;
};

struct DeviceBatch {
  std::size_t position = 0;           // 0, 1, 2 ... in the order put
  std::byte* data = nullptr;          // the block, device memory
  std::vector<std::size_t> offsets;   // each piece's, in data
  std::size_t bytes = 0;              // of the block
  std::shared_ptr<void> memory;       // holds the block: past its release, once kept
};

// A batch that failed: the producer's fail(), or a staging or copy failure.
class BatchError : public std::runtime_error {
 public:
  BatchError(std::size_t position, const std::string& what) : std::runtime_error(what), position_(position) {}
  std::size_t position() const noexcept { return position_; }

 private:
  std::size_t position_;
};

class BatchPrefetcher {
 public:
  // Throws std::invalid_argument for ahead, held or staging 0 or an align
  // that is not a power of two; CudaError (sluice/core/error.hpp) for a
  // device that cannot be used.
  explicit BatchPrefetcher(BatchPrefetchOptions options = {});
  ~BatchPrefetcher();  // stops; waits for its own copies, not for the consumer's stream
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // Producer (one thread): hands a batch over and returns its position.
  // Throws std::invalid_argument for a piece with bytes and no data;
  // std::logic_error after close() or fail() or once stopped (the producer
  // ends there); what staging or enqueuing the copy threw (CudaError, say),
  // which next() of that batch throws as a BatchError.
  std::size_t put(std::span<const BatchPiece> pieces);
  void close();  // no more batches: next() after the last returns nullopt
  // The producer failed: next() of the batch it would have put throws a BatchError saying `what`.
  void fail(const std::string& what);
  // Whether the copy of that batch has run: its page-locked pieces may be let go.
  bool copied(std::size_t position) const;

  // Consumer (one thread): the next batch, ready in `consumer`'s order; the
  // batch taken `held` calls ago is released there. nullopt after the last.
  // Throws BatchError at a batch that failed, std::logic_error after stop(),
  // CudaError where a copy failed on the device.
  std::optional<DeviceBatch> next(StreamView consumer);
  // The batch at `position`, one of the last `held` taken, keeps its block
  // past its release. Throws std::logic_error for any other position.
  void keep(std::size_t position);
  // Ends early, from the consumer: nothing runs once it returns, and a
  // producer waiting in put() gets a std::logic_error. Idempotent.
  void stop() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
