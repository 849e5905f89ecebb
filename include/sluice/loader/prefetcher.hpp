#pragma once
// Training batches on the GPU before the step asks for them.
//
//   sluice::TokenLoader loader({"data/train_*.bin"}, /*seq=*/1024, {.batch = 16, .shuffle = true});
//   for (;;) {
//     sluice::TokenBatch b = loader.next(step_stream);  // step_stream waits for the batch; the host does not
//     forward_backward<<<..., step_stream>>>(b.inputs.data(), b.targets.data(), ...);
//     if (b.last_of_epoch) break;
//   }
//
// `ahead` batches are in flight ahead of the consumer: reader threads fill
// pinned slots straight from the files (pread), a copy stream at the
// device's lowest priority copies each batch over and widens its tokens to
// int32 on the GPU (the link carries 2 bytes a token, not 4), and records the
// batch's ready event. next() makes the consumer's stream wait on that event
// (and records one of its own there, which releases the previous batch): one
// wait, and nothing else, per batch on the step's stream; the host never
// waits for the device per batch. A batch's device memory stays valid until
// the next call to next(), which releases it in the consumer stream's order:
// a slot is refilled only once the consumer's stream has passed that point.
// Memory is fixed at construction.
//
// The order of batches is global (batch_plan.hpp): rank r of `world` reads
// its slice of each global batch of `batch x world` rows, every rank serves
// the same number of batches an epoch, and a state saved on one number of
// ranks resumes on another.
//
// The loader measures, with events, how long the consumer's stream waited
// for each batch: idle() gives the GPU idle fraction of the loop.
//
// Destroying a loader waits for its own copies, not for the device: the
// last batch's memory is freed in the order of the stream last given to
// next(), which must still exist then.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sluice/core/io_error.hpp"
#include "sluice/core/stream_view.hpp"
#include "sluice/loader/batch_plan.hpp"

namespace sluice {

struct LoaderOptions {
  std::size_t batch = 8;  // rows (windows or records) per batch
  bool shuffle = false;
  std::uint64_t seed = 0;
  std::size_t rank = 0;   // this process's share of a data-parallel job
  std::size_t world = 1;
  bool drop_last = false;  // the epoch's tail: see batch_plan.hpp
  std::size_t ahead = 3;   // batches in flight ahead of the consumer (1 .. most_ahead, sluice/core/ahead.hpp)
  unsigned threads = 0;    // reader threads; 0: one per hardware thread
  std::optional<int> device;
  LoaderState start;       // where to begin: a state saved with state(), by any number of ranks
};

// How long the consumer's stream waited for data, measured with events. The
// first batch's wait is the fill (the loader starting up) and is reported
// apart; the loop runs from taking the second batch to taking the last.
struct IdleReport {
  std::size_t steps = 0;  // batches taken
  double fill_ms = 0;     // the wait for the first batch
  double waited_ms = 0;   // the waits for every later batch, summed
  double loop_ms = 0;     // second batch taken to last, on the consumer stream
  double idle_fraction() const { return loop_ms > 0 ? waited_ms / loop_ms : 0.0; }
};

struct TokenBatch {
  std::span<const std::int32_t> inputs;   // rows x seq, device memory, row-major
  std::span<const std::int32_t> targets;  // rows x seq: each input token's next token
  std::size_t rows = 0;
  std::size_t seq = 0;
  LoaderState position;       // which batch this is
  bool last_of_epoch = false;
};

struct RecordBatch {
  std::span<const std::byte> records;  // rows x record_bytes, device memory
  std::size_t rows = 0;
  std::size_t record_bytes = 0;
  LoaderState position;
  bool last_of_epoch = false;
};

namespace detail {
class CudaLoader;
}

// Batches of token windows from llm.c shards (token_shard.hpp). Throws
// ShardError naming the file for a bad shard before the first batch;
// std::invalid_argument for options that cannot work (a global batch larger
// than the windows, a batch that does not fit the device, a rank outside the
// world).
class TokenLoader {
 public:
  TokenLoader(const std::vector<std::string>& files_or_patterns, std::size_t seq, LoaderOptions options = {});
  ~TokenLoader();  // stops the readers, waits for its own copies; device slots are freed in the consumer's stream order
  TokenLoader(TokenLoader&&) noexcept;
  TokenLoader& operator=(TokenLoader&&) noexcept;

  // The next batch, ready in `stream`'s order. Throws ShardError naming the
  // file and offset when a read failed (a file truncated mid-epoch).
  TokenBatch next(StreamView stream);
  // Where the next batch starts: saved, it resumes the identical sequence.
  LoaderState state() const;
  IdleReport idle() const;
  std::size_t batches_per_epoch() const;
  std::size_t windows() const;  // in all shards, all ranks together
  std::size_t token_bytes() const;
  const BatchPlan& plan() const;

 private:
  std::size_t seq_;
  std::size_t windows_ = 0;
  std::size_t token_bytes_ = 2;
  std::unique_ptr<detail::CudaLoader> engine_;
};

// Where the records lie in a record file.
struct RecordFile {
  std::uint64_t header_bytes = 0;  // skipped before the first record
  // A file whose bytes after the header are not whole records is refused.
  // true takes its whole records and leaves the rest: trailing_bytes() says
  // how many bytes were left.
  bool ignore_partial_record = false;
};

// Batches of fixed-size records from one file (images or features
// preprocessed to fixed-size tensors), copied as they are. Throws IoError
// naming the file for a file with no whole record, or with a partial record
// at its end (unless RecordFile says to leave it).
class RecordLoader {
 public:
  RecordLoader(const std::string& file, std::size_t record_bytes, LoaderOptions options = {}, RecordFile layout = {});
  ~RecordLoader();
  RecordLoader(RecordLoader&&) noexcept;
  RecordLoader& operator=(RecordLoader&&) noexcept;

  RecordBatch next(StreamView stream);
  LoaderState state() const;
  IdleReport idle() const;
  std::size_t batches_per_epoch() const;
  std::size_t records() const { return records_; }
  std::size_t trailing_bytes() const { return trailing_bytes_; }  // left after the last whole record

 private:
  std::size_t record_bytes_;
  std::size_t records_ = 0;
  std::size_t trailing_bytes_ = 0;
  std::unique_ptr<detail::CudaLoader> engine_;
};

}  // namespace sluice
