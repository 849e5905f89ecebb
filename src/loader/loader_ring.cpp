#include "loader/loader_ring.hpp"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "sluice/core/ahead.hpp"

namespace sluice::detail {

ring::RingOptions LoaderRing::ring_options(const BatchPlan& plan, const LoaderSource& source, std::size_t ahead) {
  if (ahead < 1 || ahead > most_ahead)
    throw std::invalid_argument("loader: ahead must be 1 to " + std::to_string(most_ahead) + " batches");
  ring::RingOptions o;
  o.items = ring::RingOptions::unbounded;  // epoch after epoch, until the loader goes
  o.ahead = ahead;
  o.held = 1;
  o.slot_bytes = plan.options().batch * source.row_bytes;
  o.out_bytes = plan.options().batch * source.out_row_bytes;
  o.timed = true;  // idle(): the GPU's idle fraction is what a loader is judged by
  return o;
}

LoaderRing::LoaderRing(BatchPlan plan, LoaderSource source, ring::RingExecutor& executor, const LoaderOptions& options)
    : plan_(std::move(plan)),
      source_(std::move(source)),
      readers_(options.threads),
      producing_(plan_.resume_at(options.start)),
      next_state_(producing_) {
  ring::RingSource ring_source;
  ring_source.bytes = [this](std::size_t position) { return batch_bytes(position); };
  ring_source.fill = [this](std::size_t position, std::span<std::byte> slot) { read_batch(position, slot); };
  if (source_.out_row_bytes > 0)
    ring_source.transform = [this](std::size_t, void* lane, std::span<const std::byte> raw, std::span<std::byte> out) {
      source_.transform(lane, raw.data(), out.data(), raw.size() / source_.row_bytes);
    };
  ring_ = std::make_unique<ring::Ring>(ring::RingPlan(ring_options(plan_, source_, options.ahead)), executor,
                                       std::move(ring_source));
}

LoaderRing::~LoaderRing() { ring_.reset(); }

std::size_t LoaderRing::batch_bytes(std::size_t position) {
  std::lock_guard lock(mutex_);
  const LoaderState at = producing_;
  producing_ = plan_.next(at);
  planned_[position] = at;
  return plan_.batch_rows(at) * source_.row_bytes;
}

void LoaderRing::read_batch(std::size_t position, std::span<std::byte> slot) {
  LoaderState at;
  {
    std::lock_guard lock(mutex_);
    auto node = planned_.extract(position);
    if (node.empty()) throw std::logic_error("loader: a batch read before it was planned");
    at = node.mapped();
  }
  const std::size_t rows = slot.size() / source_.row_bytes;
  const auto read_rows = [&](std::size_t first, std::size_t count) {
    for (std::size_t r = first; r < first + count; ++r) source_.read_row(plan_.item(at, r), slot.data() + r * source_.row_bytes);
  };
  const std::size_t per_piece = rows_per_piece(rows, source_.row_bytes, readers_.thread_count());
  // A batch of one piece (a GPT step's 32 rows of 2 KiB) is read here: waking
  // reader threads for it costs more host time than its reads, taken from the
  // threads that launch the step.
  if (per_piece >= rows) return read_rows(0, rows);
  readers_.run(rows, per_piece, read_rows);
}

std::size_t LoaderRing::rows_per_piece(std::size_t rows, std::size_t row_bytes, std::size_t readers) {
  // About two pieces a reader, so that a slow read does not hold up the
  // batch's end alone, of at least the pool's smallest piece.
  const std::size_t least = (StagingPool::min_piece_bytes + row_bytes - 1) / row_bytes;
  return std::max({std::size_t{1}, rows / (2 * readers), least});
}

LoaderRing::Taken LoaderRing::next(ring::ConsumerLane lane) {
  std::optional<ring::Ring::Taken> taken;
  try {
    taken = ring_->take(lane);
  } catch (const ring::RingError& e) {
    // The loaders' callers know their own errors (ShardError, IoError): the read's, as it was thrown.
    if (e.cause()) std::rethrow_exception(e.cause());
    throw;
  }
  if (!taken) throw std::logic_error("loader: the ring ended");  // unbounded: never
  LoaderState at;
  {
    std::lock_guard lock(mutex_);
    at = next_state_;
    next_state_ = plan_.next(at);
  }
  return {taken->out ? taken->out : taken->data, plan_.batch_rows(at), at, plan_.last_of_epoch(at)};
}

LoaderState LoaderRing::state() const {
  std::lock_guard lock(mutex_);
  return next_state_;
}

IdleReport LoaderRing::idle() const {
  const ring::IdleTimes t = ring_->idle();
  return {t.taken, t.fill_ms, t.waited_ms, t.loop_ms};
}

}  // namespace sluice::detail
