#include "ring/batch_prefetcher.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "io/read_fully.hpp"
#include "sluice/core/ahead.hpp"

namespace sluice::ring {

namespace {

// Below this, the producer copies a batch's pieces itself: the staging
// threads' hand-off would cost more than the copy.
constexpr std::size_t small_batch = std::size_t{256} << 10;

// The pageable pieces, end to end: [k] is where piece k starts in that run.
struct PageableRun {
  std::vector<std::size_t> piece;  // indices into the batch's pieces
  std::vector<std::size_t> start;
  std::size_t bytes = 0;
};

PageableRun pageable_run(std::span<const HostPiece> pieces) {
  PageableRun run;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    if (pieces[k].page_locked || pieces[k].bytes == 0) continue;
    run.piece.push_back(k);
    run.start.push_back(run.bytes);
    run.bytes += pieces[k].bytes;
  }
  return run;
}

// Bytes [inside, inside + n) of piece k, from its file.
void read_piece(const HostPiece& piece, std::size_t k, std::byte* to, std::size_t inside, std::size_t n) {
  const detail::ReadOutcome got = detail::read_fully(piece.fd, to, n, piece.fd_offset + inside);
  if (got.done == n) return;
  const std::string why = got.error ? std::strerror(got.error) : "the file ended";
  throw std::runtime_error(fmt::format("prefetcher: reading piece {} of a batch from its file (descriptor {}) failed at byte {} of {}: {}",
                                       k, piece.fd, inside + got.done, piece.bytes, why));
}

}  // namespace

RingPlan BatchPrefetcher::plan(const PrefetchOptions& o) {
  if (o.ahead == 0 || o.held == 0 || o.staging == 0) throw std::invalid_argument("prefetcher: ahead, held and staging must be at least 1 batch");
  if (o.ahead > most_ahead)
    throw std::invalid_argument(fmt::format("prefetcher: ahead must be at most {} batches (sluice::most_ahead)", most_ahead));
  if (o.align == 0 || (o.align & (o.align - 1)) != 0) throw std::invalid_argument("prefetcher: align must be a power of two");
  RingOptions r;
  r.items = RingOptions::unbounded;
  r.ahead = o.ahead;
  r.held = o.held;
  r.staging_slots = std::min(o.staging, o.ahead + o.held);
  r.slot_bytes = 1;  // each slot grows to the batches it holds
  return RingPlan(r);
}

BatchPrefetcher::BatchPrefetcher(RingExecutor& executor, PrefetchOptions options)
    : options_(options), staging_(options.threads), ring_(plan(options), executor, {.put_by_caller = true}) {}

BatchPrefetcher::~BatchPrefetcher() { stop(); }

std::size_t BatchPrefetcher::put(std::span<const HostPiece> pieces) {
  for (const HostPiece& piece : pieces)
    if (!piece.data && piece.bytes > 0) throw std::invalid_argument("prefetcher: a piece of a batch has no data");
  BatchLayout layout = lay_out(pieces, options_.align);
  const PageableRun run = pageable_run(pieces);
  Ring::Item item;
  item.bytes = layout.bytes;
  // Pageable pieces go to the staging slot at their offsets in the block;
  // the copy takes each stretch of staged pieces in one piece.
  constexpr std::size_t none = SIZE_MAX;
  std::size_t staged_from = none, staged_to = 0;
  auto end_stretch = [&] {
    if (staged_from != none) item.pieces.push_back({nullptr, staged_from, staged_to - staged_from});
    staged_from = none;
  };
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    const std::size_t at = layout.offsets[k];
    if (pieces[k].bytes == 0) continue;
    if (pieces[k].page_locked) {
      end_stretch();
      item.pieces.push_back({pieces[k].data, at, pieces[k].bytes});
    } else {
      if (staged_from == none) staged_from = at;
      staged_to = at + pieces[k].bytes;
    }
  }
  end_stretch();
  if (run.bytes > 0) {
    item.fill = [&](std::span<std::byte> slot) {
      auto copy_range = [&](std::size_t from, std::size_t length) {
        // The pieces that [from, from + length) of the run covers.
        std::size_t r = std::upper_bound(run.start.begin(), run.start.end(), from) - run.start.begin() - 1;
        for (std::size_t done = 0; done < length; ++r) {
          const std::size_t k = run.piece[r];
          const std::size_t inside = from + done - run.start[r];
          const std::size_t n = std::min(length - done, pieces[k].bytes - inside);
          std::byte* to = slot.data() + layout.offsets[k] + inside;
          if (pieces[k].fd >= 0)
            read_piece(pieces[k], k, to, inside, n);
          else
            std::memcpy(to, pieces[k].data + inside, n);
          done += n;
        }
      };
      if (run.bytes < small_batch)
        copy_range(0, run.bytes);
      else
        staging_.run(run.bytes, staging_.balanced_piece_bytes(run.bytes), copy_range);
    };
  }
  // The offsets are known before the consumer can take the position.
  std::unique_lock lock(mutex_);
  const std::size_t position = ring_.next_put();
  offsets_[position] = layout.offsets;  // the fill still reads layout
  lock.unlock();
  try {
    return ring_.put(item);
  } catch (...) {
    lock.lock();
    offsets_.erase(position);
    throw;
  }
}

void BatchPrefetcher::close() { ring_.close(); }
void BatchPrefetcher::fail(const std::string& what) { ring_.fail(what); }

std::optional<BatchPrefetcher::Batch> BatchPrefetcher::next(ConsumerLane lane) {
  auto taken = ring_.take(lane);
  if (!taken) return std::nullopt;
  Batch batch{taken->position, taken->data, {}, taken->bytes, std::move(taken->memory)};
  std::lock_guard lock(mutex_);
  auto at = offsets_.find(taken->position);
  if (at != offsets_.end()) {
    batch.offsets = std::move(at->second);
    offsets_.erase(at);
  }
  return batch;
}

}  // namespace sluice::ring
