#pragma once
// The pipeline's machinery, shared by the files of src/pipeline/:
//   spans.cpp         what each span is and how its bytes reach the device (validation, classification)
//   registration.cpp  page-locking pageable spans in place (HostMemoryPolicy)
//   resources.cpp     the device ring, pinned staging slots and event sets, kept and grown across runs
//   run.cpp           one run: the driver that enqueues chunks, the drain that finishes them
//   pipeline.cpp      the public Pipeline and Submission
//   rerun_stages.cpp  Pipeline::rerun_stages_alone
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sluice/device_buffer.hpp"
#include "sluice/event.hpp"
#include "sluice/host_registration.hpp"
#include "sluice/pinned_buffer.hpp"
#include "sluice/pipeline.hpp"
#include "sluice/pointer_query.hpp"
#include "sluice/staging_pool.hpp"
#include "sluice/stream.hpp"
#include "sluice/worker_thread.hpp"

namespace sluice::detail {

// How a span's bytes travel between the caller and the device slot in one run.
enum class HostPath {
  dma,     // page-locked memory: the copy engines read or write it directly
  staged,  // pageable memory: copied through a pinned slot by the staging threads
  source,  // a Source fills the pinned slot
  sink,    // a Sink empties the pinned slot
};

// Page-locking of one pageable span by the pipeline, in place, as one
// registration of its pages; it may run on a background thread between runs.
class SpanRegistration {
 public:
  SpanRegistration() = default;
  ~SpanRegistration();  // joins, then unregisters
  SpanRegistration(const SpanRegistration&) = delete;
  SpanRegistration& operator=(const SpanRegistration&) = delete;

  // Registers [data, data + bytes) now. Throws CudaError when the driver refuses.
  void register_now(const void* data, std::size_t bytes, bool read_only, int device);
  // Queues the registration on `registrar` (one background thread); failures are kept, not thrown.
  void register_in_background(StagingPool& registrar, const void* data, std::size_t bytes, bool read_only, int device);
  bool started() const { return started_; }
  // Until a background registration has finished (successfully or not).
  void wait() const;
  // True once the span is registered (a background registration has finished without error).
  bool complete() const { return complete_.load(); }
  // Why a background registration failed, or empty.
  std::string failure() const;
  // Waits for a background registration, then unregisters everything.
  void release();

 private:
  void register_span(const void* data, std::size_t bytes, bool read_only, int device);
  HostRegistration registration_;  // empty when every page was locked already
  StagingPool::Ticket background_;
  bool started_ = false;
  std::atomic<bool> complete_{false};
  mutable std::mutex mutex_;
  std::string failure_;
};

struct SpanRecord {
  SpanRole role = SpanRole::input;
  std::size_t item_bytes = 0;
  std::size_t items = 0;
  std::byte* host = nullptr;       // host memory spans
  std::shared_ptr<Source> source;  // or a source (inputs)
  std::shared_ptr<Sink> sink;      // or a sink (outputs)
  std::unique_ptr<SpanRegistration> registration;  // pageable spans the pipeline page-locks

  // Decided per run (classify_spans):
  HostPath path = HostPath::dma;
  std::vector<MemoryExtent> extents;  // dma: where copies must be cut
  std::size_t runs = 0;               // runs over this memory, for the automatic policy
  bool register_after_run = false;    // automatic: staged this run, registered once it ends

  bool copied_in() const { return role != SpanRole::output; }
  bool copied_out() const { return role != SpanRole::input; }
  bool host_pass() const { return path != HostPath::dma; }
  std::size_t bytes() const { return items * item_bytes; }
  std::byte* at(std::size_t item) const { return host + item * item_bytes; }
  std::string describe(std::size_t index) const;
};

// The events that carry one chunk from stage to stage.
struct ChunkEvents {
  ChunkEvents(Event::Timing timing)
      : h2d_start(timing), h2d_done(timing), compute_start(timing), compute_done(timing), d2h_start(timing),
        d2h_done(timing) {}
  // The host waits on h2d_done (to reuse a stage-in slot) and on d2h_done
  // (to finish the chunk) by polling them (core/event_poll.hpp says why).
  Event h2d_start, h2d_done, compute_start, compute_done, d2h_start, d2h_done;
};

// Keeps the order of calls to a source or sink that is not splittable: the
// call for chunk c waits until the one for chunk c - 1 has returned.
class ChunkGate {
 public:
  void reset(std::size_t first);
  // Throws std::runtime_error when the gate was closed by a failure.
  void enter(std::size_t chunk);
  void leave();
  void close();

 private:
  std::mutex mutex_;
  std::condition_variable turn_;
  std::size_t next_ = 0;
  bool closed_ = false;
};

}  // namespace sluice::detail

namespace sluice {

struct Pipeline::Engine {
  explicit Engine(PipelineOptions o);
  ~Engine();

  PipelineOptions options;
  int device = 0;
  Stream h2d, d2h;
  std::vector<Stream> compute;
  std::vector<detail::SpanRecord> spans;
  std::vector<std::unique_ptr<detail::ChunkGate>> gates;  // one per span, for sources and sinks that are not splittable
  ComputeFn compute_fn;
  ChunkDoneFn done_fn;
  std::uint64_t generation = 0;
  bool ran = false;  // spans were run since they were added: adding more is refused
  std::atomic<bool> busy{false};
  bool slots_filled = false;  // a run completed on the current ring: rerun_stages_alone may use it
  std::optional<ChunkPlan> last_plan;

  // Resources, kept and grown across runs (resources.cpp).
  std::size_t depth() const { return options.depth; }
  std::size_t in_slots() const { return in_slot_count; }     // stage-in: set per run by prepare (stage_in_slots)
  std::size_t out_slots() const { return options.depth + 1; } // stage-out: D2H may run this far ahead of the host
  // Event sets bound how far the driver runs ahead of the drain. The drain
  // blocks on each chunk's last event and wakes ~50 us after it: with few
  // sets and short chunks, the driver would stall behind those wake-ups and
  // leave the GPU idle. Events are cheap; 32 sets absorb that.
  std::size_t event_sets() const { return std::max<std::size_t>(2 * options.depth + 4, 32); }
  std::vector<std::vector<DeviceBuffer<std::byte>>> device_slots;  // [span][slot]
  std::vector<std::vector<PinnedBuffer<std::byte>>> pinned_in;   // [span][slot]: stage-in, host-pass inputs
  std::vector<std::vector<PinnedBuffer<std::byte>>> pinned_out;  // [span][slot]: stage-out, host-pass outputs
  std::vector<detail::ChunkEvents> events;                                 // [chunk % event_sets()]
  std::size_t in_slot_count = 3;
  bool events_timed = false;
  std::unique_ptr<StagingPool> pool;       // created when something passes through the host
  std::unique_ptr<StagingPool> registrar;  // one thread: background registrations, one at a time
  StagingPool& registration_queue();

  // Threads last: they are joined first, before what they use is freed.
  std::unique_ptr<WorkerThread> driver_thread, drain_thread;

  // spans.cpp
  void validate() const;
  void classify_spans(std::vector<std::string>& notes);
  std::size_t widest_item() const;
  // After classify_spans: a run whose host copies through the slots both ways gets its own default chunks.
  ChunkPlan plan_chunks(std::size_t items) const;
  // resources.cpp
  struct Allocated {
    std::size_t device = 0, pinned = 0;
  };
  Allocated prepare(std::size_t chunk_items);
  StagingPool& staging_pool();
  unsigned staging_thread_count() const;
};

}  // namespace sluice
