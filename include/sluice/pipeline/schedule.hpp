#pragma once
// A run's schedule, planned before the run, as a value: for every chunk its
// operations, the lane each runs on, the slot of each ring it uses, and the
// operations it waits on. Host-only.
//
// Like a database's query plan, one schedule is read by several executors:
// the CUDA executor enqueues it on streams and events, the host executor runs
// it on host threads and checks every edge as it goes, and the model plays it
// through measured rates (`sluice model --schedule` prints it). The rules are
// here and nowhere else: ring sizes, slot numbers, who waits on whom.
//
// Chunk c, with depth D, I pinned stage-in slots, O pinned stage-out slots,
// E event sets and S compute streams:
//
//   stage-in  c  host staging      -> pinned-in[c % I]       after h2d c-I      (the slot's last reader)
//   h2d       c  H2D stream        pinned-in or caller memory -> device[c % D]
//                                                            after stage-in c   (its data)
//                                                                  d2h c-D      (the device slot's last reader)
//                                                                  stage-out c-E (the event set's last reader)
//   compute   c  compute stream c % S, on device[c % D]     after h2d c
//   d2h       c  D2H stream        device[c % D] -> pinned-out[c % O] or caller memory
//                                                            after compute c
//                                                                  stage-out c-O (the pinned slot's last reader)
//   stage-out c  drain             pinned-out[c % O] -> caller memory or sink; finishes the chunk
//                                                            after d2h c
//
// Every operation of chunk c also records into or reads event set c % E: the
// events that carry the chunk from stage to stage. The H2D, D2H and compute
// streams and the drain run their operations one at a time in chunk order;
// stage-in operations start in chunk order and may overlap (the staging
// threads share them out). An operation no span takes part in (stage-in
// with nothing to stage) is inactive: it still marks the chunk's progress.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/few.hpp"
#include "sluice/pipeline/chunk_plan.hpp"
#include "sluice/pipeline/pipeline_options.hpp"
#include "sluice/trace/stage_interval.hpp"

namespace sluice {

enum class SpanRole { input, output, inout };

// How a span's bytes travel between the caller and its device slot in one run.
enum class HostPath {
  direct,  // page-locked memory: the copy engines read or write it where it is
  staged,  // pageable memory: copied through a pinned slot by the staging threads
  source,  // a Source fills the pinned slot
  sink,    // a Sink empties the pinned slot
};
std::string_view to_string(HostPath path);

// What the planner needs to know of a span.
struct SpanShape {
  SpanRole role = SpanRole::input;
  HostPath path = HostPath::direct;
  std::size_t item_bytes = 0;

  bool copied_in() const { return role != SpanRole::output; }
  bool copied_out() const { return role != SpanRole::input; }
  bool host_pass() const { return path != HostPath::direct; }
};

// A chunk's stages, in the order its data passes them.
enum class Stage : std::uint8_t { stage_in, h2d, compute, d2h, stage_out };
inline constexpr std::size_t stage_count = 5;
std::string_view to_string(Stage stage);
// The host runs stage-in and stage-out; the GPU (or the host executor's lanes) the rest.
constexpr bool on_host(Stage stage) { return stage == Stage::stage_in || stage == Stage::stage_out; }

struct OpRef {
  std::size_t chunk = 0;
  Stage stage = Stage::stage_in;
  friend constexpr bool operator==(const OpRef&, const OpRef&) = default;
  // Its place among all operations: chunk by chunk, stage by stage.
  constexpr std::size_t index() const { return chunk * stage_count + static_cast<std::size_t>(stage); }
};

// The rings of memory and events a run cycles through, one slot per chunk in turn.
enum class Ring : std::uint8_t { pinned_in, device, pinned_out, event_set };
inline constexpr std::size_t ring_count = 4;
std::string_view to_string(Ring ring);

enum class Access : std::uint8_t { read, write, read_write };
constexpr bool reads(Access a) { return a != Access::write; }
constexpr bool writes(Access a) { return a != Access::read; }

struct SlotUse {
  Ring ring = Ring::device;
  std::size_t slot = 0;
  Access access = Access::read;
};

// Why an operation waits on another.
enum class Reason : std::uint8_t {
  data,             // the chunk's previous stage produced what this one uses
  pinned_in_slot,   // the pinned stage-in slot's last reader must be done with it
  device_slot,      // the device slot's last reader must be done with it
  pinned_out_slot,  // the pinned stage-out slot's last reader must be done with it
  event_set,        // the event set's last reader (the drain) must be done with it
};
std::string_view to_string(Reason reason);

struct Edge {
  OpRef on;
  Reason why = Reason::data;
};

struct Op {
  OpRef ref;
  Lane lane = Lane::compute;
  unsigned stream = 0;       // which compute stream (compute operations)
  ItemRange items;
  std::size_t bytes = 0;     // bytes moved, every span together; 0 for compute
  bool active = true;        // false: no span takes part; it only marks the chunk's progress
  bool after_caller = false; // the run's first H2D waits for the caller's stream (run(stream))
  Few<SlotUse, 3> slots;
  Few<Edge, 3> waits;        // besides the operation before it on its lane
};

struct ScheduleInput {
  std::vector<SpanShape> spans;
  ChunkPlan plan{0, 1};
  std::size_t depth = 4;
  unsigned compute_streams = 1;
  bool caller_stream = false;  // run(stream): the first H2D waits for the caller's earlier work
};

class Schedule {
 public:
  // Throws std::invalid_argument for no spans, an item of 0 bytes, depth 0 or no compute stream.
  explicit Schedule(ScheduleInput input);

  const std::vector<SpanShape>& spans() const { return in_.spans; }
  const ChunkPlan& plan() const { return in_.plan; }
  std::size_t chunk_count() const { return in_.plan.chunk_count(); }
  std::size_t depth() const { return in_.depth; }
  unsigned compute_streams() const { return in_.compute_streams; }
  bool caller_stream() const { return in_.caller_stream; }

  // Some input (output) span passes through the host: stage-in (stage-out) operations are active.
  bool stages_in() const { return stages_in_; }
  bool stages_out() const { return stages_out_; }
  // Slots in each ring, per span (0: the ring is not used).
  std::size_t ring_size(Ring ring) const { return rings_[static_cast<std::size_t>(ring)]; }
  std::size_t slot(Ring ring, std::size_t chunk) const { return chunk % ring_size(ring); }
  // Bytes of one span's slot: the largest chunk's items.
  std::size_t slot_bytes(std::size_t span) const { return in_.plan.chunk_items() * in_.spans.at(span).item_bytes; }
  // Bytes per item of every copied-in (copied-out) span together.
  std::size_t in_item_bytes() const { return in_item_bytes_; }
  std::size_t out_item_bytes() const { return out_item_bytes_; }

  // One operation, derived from the rules above. Throws std::out_of_range past the last chunk.
  Op op(OpRef ref) const;
  Op op(std::size_t chunk, Stage stage) const { return op({chunk, stage}); }

  // The driver submits the GPU's operations chunk by chunk: chunk c's
  // compute and D2H, after the H2D copies up to last_h2d_with(c). With
  // nothing to stage in, H2D copies run up to depth - 1 chunks ahead of the
  // kernels, so the first copies start while the host still enqueues the
  // first kernels (each still waits on the GPU for its slot).
  std::size_t last_h2d_with(std::size_t chunk) const;
  // Every GPU operation in the order the driver submits it.
  std::vector<OpRef> submission_order() const;

 private:
  ScheduleInput in_;
  std::array<std::size_t, ring_count> rings_{};
  std::size_t in_item_bytes_ = 0, out_item_bytes_ = 0;
  bool stages_in_ = false, stages_out_ = false;
};

// The schedule a pipeline with these options runs over `items` items of these
// spans: the chunk plan (src/pipeline/chunking.hpp) and then the rules above.
// `kernel_bound`: the kernels are known to take longer than the copies (a
// timed run showed it, or the model's rates say so); with the chunk size
// left to the pipeline (PipelineOptions::adapt_chunks) the chunks then ramp,
// from smaller chunks where the run is `replayed` (a captured graph), or,
// with kernels that may overlap and up to 16 MiB of data, are all 512 KiB.
Schedule plan_schedule(const PipelineOptions& options, std::vector<SpanShape> spans, std::size_t items,
                       bool caller_stream = false, bool kernel_bound = false, bool replayed = false);

// The schedule's invariants, over every operation: each chunk's stages come
// once and in order, each lane's operations in chunk order; every operation
// that writes a slot comes after every use of the slot's previous contents,
// and every read after the write it reads; the rings are the sizes the plan
// gives. Returns one line per fault, empty when the schedule holds.
// `keep` may leave edges out, to show what each one guards.
using EdgeFilter = std::function<bool(const Op& op, const Edge& edge)>;
std::vector<std::string> check(const Schedule& schedule, const EdgeFilter& keep = {});

// EXPLAIN: the rings, then every operation of the first `chunks` chunks (and
// the last one), one per line, with its lane, slots and edges.
std::string explain(const Schedule& schedule, std::size_t chunks = 6);

}  // namespace sluice
