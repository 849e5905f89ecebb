#pragma once
// sluice::Pipeline streams host data of any size through a computation on the
// GPU: copy in, compute, copy out, chunk by chunk, with the three engines
// (H2D copy, SMs, D2H copy) busy at once.
//
//   std::vector<float> a(n), b(n), c(n);
//   sluice::Pipeline p;
//   p.input(a).input(b).output(c).compute([](const sluice::Chunk& chunk) {
//     add<<<blocks(chunk.size()), 256, 0, chunk.stream>>>(
//         chunk.device<const float>(0), chunk.device<const float>(1), chunk.device<float>(2), chunk.size());
//   });
//   p.run();
//
// Device memory is a ring of `depth` slots of one chunk per span, whatever the
// input size. Dedicated streams serve H2D, compute and D2H; events carry each
// chunk from stage to stage and free its slot when its D2H is done. Pageable
// spans (std::vector, new[]) are staged through pinned buffers by worker
// threads, overlapped with the copies; pinned and registered spans go straight
// to the copy engines.
#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <ranges>
#include <span>
#include <type_traits>
#include <vector>

#include "sluice/chunk_plan.hpp"
#include "sluice/run_report.hpp"
#include "sluice/stream_view.hpp"

namespace sluice {

struct PipelineOptions {
  std::size_t chunk_items = 0;   // items per chunk; 0 picks default_chunk_items()
  // Device slots per span (>= 1): one chunk copying in, two computing, one copying out.
  std::size_t depth = 4;
  unsigned staging_threads = 0;  // host copy threads per direction; 0 picks a default
  // Chunks take turns over this many compute streams, so one chunk's kernel
  // can fill the SMs the tail of the previous one leaves idle.
  unsigned compute_streams = 2;
  int priority = 0;              // CUDA stream priority of all the pipeline's streams
  bool record = false;           // keep per-chunk stage intervals in the report
};

// One chunk, as the compute callable sees it.
struct Chunk {
  std::size_t index = 0;
  ItemRange items;        // which items of the whole input this chunk holds
  StreamView stream;      // launch on this stream, and only this one
  std::span<void* const> slots;  // device pointer per span, in the order spans were added

  std::size_t size() const { return items.size(); }
  template <typename T>
  T* device(std::size_t span) const {
    return static_cast<T*>(slots[span]);
  }
};

using ComputeFn = std::function<void(const Chunk&)>;
// Called once a chunk's outputs are in host memory, in chunk order, from a
// sluice thread: a consumer can start on finished output early.
using ChunkDoneFn = std::function<void(std::size_t index, ItemRange items)>;

class Pipeline;

// Contiguous host memory the pipeline may refer to: a span, or a container
// the caller keeps (a temporary std::vector would be gone before the run).
template <typename R>
concept HostRange =
    std::ranges::contiguous_range<R> && (std::ranges::borrowed_range<R> || std::is_lvalue_reference_v<R>);
template <typename R>
concept WritableHostRange =
    HostRange<R> && !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

// A run in flight. wait() returns its report or rethrows its failure.
// Destroying an unwaited submission waits for it. The pipeline must outlive
// its submissions.
class Submission {
 public:
  Submission(Submission&&) noexcept;
  Submission& operator=(Submission&&) noexcept;
  ~Submission();
  RunReport wait();
  bool valid() const { return state_ != nullptr; }

 private:
  friend class Pipeline;
  struct State;
  explicit Submission(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class Pipeline {
 public:
  // Streams are created on the current device at construction; the device
  // must stay current for run() and submit() from other threads too.
  explicit Pipeline(PipelineOptions options = {});
  ~Pipeline();
  Pipeline(Pipeline&&) noexcept;
  Pipeline& operator=(Pipeline&&) noexcept;

  // Spans refer to the caller's memory, which must outlive the run. Spans are
  // numbered in the order added, inputs and outputs alike (Chunk::device).
  template <HostRange R>
  Pipeline& input(R&& range) {
    return add_range(range, Role::input);
  }
  template <WritableHostRange R>
  Pipeline& output(R&& range) {
    return add_range(range, Role::output);
  }
  // Copied in, transformed in place on the device, copied back to the same memory.
  template <WritableHostRange R>
  Pipeline& inout(R&& range) {
    return add_range(range, Role::inout);
  }
  Pipeline& compute(ComputeFn fn);
  Pipeline& on_chunk_done(ChunkDoneFn fn);
  // Forgets the spans (not the compute callable), keeping device and pinned
  // memory for the next run of the same shape.
  Pipeline& clear_spans();

  // Runs to the end. Throws std::invalid_argument for a bad configuration
  // before any work starts; CudaError naming the chunk and stage for a CUDA
  // failure; and whatever the compute or chunk-done callable threw.
  RunReport run();
  Submission submit();

  // Times each stage alone over the same chunks (pinned copies in, compute,
  // copies out, and both copy directions at once), keeping the fastest of
  // `repeats`, for compute_bound() (DESIGN.md). Runs the compute callable again
  // over every chunk, on the slot contents of the last run.
  StageCosts measure_stage_costs(int repeats = 3);

  const PipelineOptions& options() const;

  enum class Role { input, output, inout };

 private:
  friend class Submission;
  Submission start(bool drive_on_caller);
  template <typename R>
  Pipeline& add_range(R& range, Role role) {
    return add_span(std::ranges::data(range), std::ranges::size(range), sizeof(std::ranges::range_value_t<R>), role);
  }
  Pipeline& add_span(const void* data, std::size_t items, std::size_t item_bytes, Role role);
  struct Engine;
  std::unique_ptr<Engine> engine_;
};

}  // namespace sluice
