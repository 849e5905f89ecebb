#pragma once
// sluice::Pipeline streams host data of any size through a computation on the
// GPU: copy in, compute, copy out, chunk by chunk, with the copy engines and
// the SMs busy at once.
//
//   std::vector<float> a(n), b(n), c(n);
//   sluice::Pipeline p;
//   auto x = p.input(a), y = p.input(b);
//   auto z = p.output(c);
//   p.compute([=](const sluice::Chunk& chunk) {
//     add<<<blocks(chunk.size()), 256, 0, chunk.stream>>>(chunk[x].data(), chunk[y].data(), chunk[z].data(),
//                                                         chunk.size());
//   });
//   sluice::RunReport report = p.run();
//
// Device memory is a ring of `depth` slots of one chunk per span, whatever the
// input size. Dedicated streams serve H2D, compute and D2H; events carry each
// chunk from stage to stage and free its slot when its D2H is done. Pageable
// spans are staged through pinned slots by the staging threads, or
// registered (PipelineOptions::host_memory); pinned spans go straight to the
// copy engines; sources and sinks fill and drain the pinned slots themselves.
#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <type_traits>

#include "sluice/core/stream_view.hpp"
#include "sluice/pipeline/chunk.hpp"
#include "sluice/pipeline/pipeline_options.hpp"
#include "sluice/pipeline/run_report.hpp"
#include "sluice/pipeline/schedule.hpp"
#include "sluice/pipeline/source.hpp"

namespace sluice {

using ComputeFn = std::function<void(const Chunk&)>;
// Called once a chunk's outputs are in host memory (or written by its sink),
// in chunk order, from a sluice thread: a consumer can start on finished
// output early.
using ChunkDoneFn = std::function<void(std::size_t index, ItemRange items)>;

// How the compute callable is used from run to run.
enum class Replay {
  // It is called for every chunk of every run. The default.
  none,
  // The run is captured as a CUDA graph (every chunk's copies, the kernels
  // the callable launches, the events between them) and each run replays
  // it: a run then costs the host one graph launch (host time saved, not
  // device time: the GPU's work is the same). So the callable is called
  // once per chunk AT CAPTURE ONLY, and must launch the same work each
  // time: no host-side state, no kernel arguments that change from run to
  // run, no memory it allocates and frees (a graph keeps the addresses it
  // captured). A graph is valid only for what it captured; a run captures
  // again, before any of its work, when
  //  - it is the first, or the first after rebind(), clear_spans() or a new
  //    compute();
  //  - the first run learnt its chunks (PipelineOptions::adapt_chunks): it
  //    was captured with timing marks, the second is captured without;
  //  - the schedule changed (the rings' slots were made anew, a caller's
  //    stream given or not);
  //  - any span's page-locking changed: memory unlocked and locked again at
  //    the same address, by the caller (a registration ended and taken
  //    anew) or by register_memory, whose locking is new each run (so such
  //    a pipeline captures every run, and its notes say so).
  // Only a run whose bytes all move by the copy engines can be replayed:
  // pinned or registered spans. Spans staged through the host (memory that
  // was page-locked and is no longer, too), sources, sinks and a chunk-done
  // callable are refused before any work, as is the host executor.
  graph,
};

// Contiguous host memory the pipeline may refer to: a span, or a container
// the caller keeps (a temporary std::vector would be gone before the run).
template <typename R>
concept HostRange =
    std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
    (std::ranges::borrowed_range<R> || std::is_lvalue_reference_v<R>) &&
    std::is_trivially_copyable_v<std::ranges::range_value_t<R>>;
template <typename R>
concept WritableHostRange =
    HostRange<R> && !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

template <HostRange R>
using item_of = std::ranges::range_value_t<R>;

class HostExecutor;
namespace detail {
class Executor;
class PipelineCore;
class Run;
struct PipelineAccess;
}  // namespace detail

// A run in flight. wait() returns its report or rethrows its failure.
// Destroying an unwaited submission waits for it and reports a failure on
// stderr. A submission keeps what it runs on alive: the pipeline may be
// destroyed or assigned while its submission is live.
class Submission {
 public:
  Submission(Submission&&) noexcept;
  // Waits for the run this one held, takes over `other`'s, then rethrows the
  // earlier run's failure if it failed (it is not lost).
  Submission& operator=(Submission&& other);
  ~Submission();
  RunReport wait();
  bool valid() const { return state_ != nullptr; }

  struct State;

 private:
  friend class Pipeline;
  explicit Submission(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class Pipeline {
 public:
  // On the GPU: options.device, or the device current now.
  explicit Pipeline(PipelineOptions options = {});
  // On the host executor: the same schedule, run on host threads over host
  // memory with a host compute callable, every edge checked as it runs
  // (host_executor.hpp). For testing pipeline code where there is no GPU.
  Pipeline(PipelineOptions options, const HostExecutor& executor);
  ~Pipeline();
  Pipeline(Pipeline&&) noexcept;
  Pipeline& operator=(Pipeline&&) noexcept;

  // Spans refer to the caller's memory, which must outlive the run; the
  // pipeline keeps nothing of it page-locked once a run has returned. They
  // are added before the first run; after it, rebind() a span to other
  // memory or clear_spans() to start over. Throws std::logic_error
  // otherwise, or while a run is in flight.
  template <HostRange R>
  SpanHandle<const item_of<R>> input(R&& range) {
    return {add_host(std::ranges::data(range), std::ranges::size(range), sizeof(item_of<R>), SpanRole::input),
            generation()};
  }
  template <WritableHostRange R>
  SpanHandle<item_of<R>> output(R&& range) {
    return {add_host(std::ranges::data(range), std::ranges::size(range), sizeof(item_of<R>), SpanRole::output),
            generation()};
  }
  // Copied in, transformed in place on the device, copied back to the same memory.
  template <WritableHostRange R>
  SpanHandle<item_of<R>> inout(R&& range) {
    return {add_host(std::ranges::data(range), std::ranges::size(range), sizeof(item_of<R>), SpanRole::inout),
            generation()};
  }
  template <typename T>
  SpanHandle<const T> input(SourceOf<T> source) {
    return {add_source(std::move(source.source), sizeof(T)), generation()};
  }
  template <typename T>
  SpanHandle<T> output(SinkOf<T> sink) {
    return {add_sink(std::move(sink.sink), sizeof(T)), generation()};
  }

  // Points a span at other host memory of the same item type, keeping the
  // compute callable and its handles.
  template <typename T, HostRange R>
    requires std::same_as<std::remove_cv_t<item_of<R>>, T>
  void rebind(SpanHandle<const T> handle, R&& range) {
    rebind_host(handle.index(), handle_generation(handle), std::ranges::data(range), std::ranges::size(range), false);
  }
  template <typename T, WritableHostRange R>
    requires(!std::is_const_v<T> && std::same_as<item_of<R>, T>)
  void rebind(SpanHandle<T> handle, R&& range) {
    rebind_host(handle.index(), handle_generation(handle), std::ranges::data(range), std::ranges::size(range), true);
  }

  // Replay::graph: see Replay. Replacing the callable starts a new capture.
  Pipeline& compute(ComputeFn fn, Replay replay = Replay::none);
  Pipeline& on_chunk_done(ChunkDoneFn fn);
  // Forgets the spans and the compute callable that used their handles;
  // keeps device and pinned memory for the next run.
  Pipeline& clear_spans();

  // Runs to the end. Throws std::invalid_argument for a bad configuration
  // before any work starts; CudaError naming the chunk and stage for a CUDA
  // failure; IoError naming the file and offset for a file that failed; and,
  // where the compute or chunk-done callable (or a source or sink) threw, a
  // std::runtime_error naming the callable, the chunk and the stage, with
  // what it threw nested as it was (std::rethrow_if_nested gives it back).
  // A run whose sinks committed returns its report: a measurement that then
  // fails (RunReport::bound) is said in the report's notes.
  RunReport run();
  // The same, ordered with the caller's work on `stream`: the first chunk
  // waits for what is already on it, and its later work waits for the last
  // chunk, with no device-wide synchronisation.
  RunReport run(StreamView stream);
  // Starts a run on sluice's threads and returns at once.
  Submission submit();
  // Starts a run ordered with `stream` as run(stream) is. Returns once every
  // chunk is on the GPU's queues, which is what lets the caller's later
  // work on `stream` wait for the last one; host outputs (staged spans,
  // sinks, and the sub-page ends of spans sluice page-locks itself, which
  // travel through a pinned buffer: HostMemoryPolicy) are complete when
  // wait() returns.
  Submission submit(StreamView stream);

  const PipelineOptions& options() const;
  // The CUDA device it runs on; -1 on the host executor.
  int device() const;

 private:
  friend struct detail::PipelineAccess;
  Pipeline(PipelineOptions options, std::unique_ptr<detail::Executor> executor);
  std::size_t add_host(const void* data, std::size_t items, std::size_t item_bytes, SpanRole role,
                       std::shared_ptr<const void> owner = nullptr);
  std::size_t add_source(std::shared_ptr<Source> source, std::size_t item_bytes);
  std::size_t add_sink(std::shared_ptr<Sink> sink, std::size_t item_bytes);
  void rebind_host(std::size_t index, std::uint64_t generation, const void* data, std::size_t items, bool writable,
                   std::shared_ptr<const void> owner = nullptr);
  std::uint64_t generation() const;
  template <typename T>
  static std::uint64_t handle_generation(const SpanHandle<T>& h) {
    return h.generation_;
  }
  // worker: sluice's threads drive and drain; drive_on_caller: the caller's
  // thread enqueues every chunk first; finish_on_caller: the caller waits at once.
  enum class StartMode { worker, drive_on_caller, finish_on_caller };
  Submission start(std::optional<StreamView> caller, StartMode mode);
  std::shared_ptr<detail::PipelineCore> core_;
};

}  // namespace sluice
