#pragma once
// A ring's plan, made before it runs, as a value: the positions the consumer
// takes in turn, the item each one holds, the slot it uses, and the edges
// every operation waits on. Host-only.
//
// A ring hands its consumer things ahead of the moment it needs them (the
// batches of a loader, the layers of a model streamed onto the GPU). Like a
// pipeline's schedule, one plan is read by several executors: a CUDA executor
// enqueues it on a copy stream and events, the host executor runs it on
// threads and checks every edge, and explain() prints it. The rules are here
// and nowhere else: how many slots, which slot a position uses, who waits on
// whom.
//
// Position i, with A = ahead, H = held, D device slots (D >= A + H) and P staging slots
// (P = D unless given, where the producer stages; none where the copy reads
// the caller's page-locked memory):
//
//   stage   i  host threads  item -> staging[i % P]    after take i-A     (ahead: the producer's lead)
//                                                            copy i-P     (the staging slot's last reader)
//   copy    i  copy lane     staging or caller memory -> device[i % D]
//                                                      after stage i      (its data; unstaged: take i-A)
//                                                            release i-D  (the device slot's last user)
//   transform i copy lane    the slot's copied bytes -> its output bytes (only where out_bytes > 0)
//                                                      after copy i
//   ready   i  copy lane     an event after the copy   after copy i (or transform i)
//   take    i  consumer lane the consumer's lane waits after ready i
//   release i  consumer lane the consumer is done      after take i       (by default at take i+H)
//
// A ring to the host (RingOptions::direction) carries what the caller's
// work makes on the device back to the host: a checkpoint's tensors to a
// file, activations or gradients to host memory. With A = ahead and P
// staging slots (P = A unless given; none where the copy writes the caller's
// page-locked memory):
//
//   mark    i  consumer lane the item's device bytes are made   after drain i-A (ahead: the caller keeps
//                                                                  the device bytes of A positions at most)
//   copy    i  copy lane     the caller's device memory -> staging[i % P]
//                                                      after mark i       (its data)
//                                                            drain i-P    (the staging slot's last reader)
//   ready   i  copy lane     an event after the copy   after copy i
//   drain   i  host          the host reads staging[i % P] (writes a file, sums a gradient)
//                                                      after ready i
//
// Edges on positions before the plan's start (a resumed ring) are left out:
// those operations never run.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::ring {

// The order in which a ring visits its items.
enum class Order : std::uint8_t {
  batches,  // 0, 1, ..., items - 1, once per step
  layers,   // a model's layers forward then backward: 0 .. L-1, L-1 .. 0, once per step
};
std::string_view to_string(Order order);

// Which way a ring carries its items.
enum class Direction : std::uint8_t {
  to_device,  // host items onto device slots, for a consumer's lane
  to_host,    // the caller's device bytes into staging slots or its page-locked memory, for the host
};
std::string_view to_string(Direction direction);

struct RingOptions {
  // Items for a ring whose producer hands it items until it says it is done
  // (a prefetcher over a Python iterable): position i holds item i.
  static constexpr std::size_t unbounded = SIZE_MAX;

  std::size_t items = 0;       // distinct items: batches, or layers; or unbounded
  Direction direction = Direction::to_device;
  Order order = Order::batches;
  std::size_t steps = 1;       // passes over the order (epochs, training steps)
  std::size_t ahead = 2;       // positions the producer may run ahead of the consumer
  std::size_t held = 1;        // positions the consumer holds at once: the oldest is released as it takes one more
  std::size_t slots = 0;       // device slots; 0: ahead + held (to the host: none)
  // Staging slots of a staged plan; 0: one per device slot (to the host: ahead). Two let the host
  // stage one item while the copy reads the last, and keep fewer bytes of
  // host memory in flight (for large items, fewer than the cache holds).
  std::size_t staging_slots = 0;
  bool staged = true;          // the producer fills pinned staging slots (else the copy reads the caller's memory;
                               // to the host: it writes the caller's page-locked memory)
  // Bytes of one item, in every slot. An unbounded ring's first capacity (items may differ), 0
  // there: no memory until an item needs some (a file read, whose chunks go to the caller's memory).
  std::size_t slot_bytes = 0;
  std::size_t start = 0;       // the first position taken: a ring resumed where another stopped
  // Bytes a transform writes into each device slot after the copy (a token
  // loader's int32 inputs and targets); 0: no transform. A slot is then
  // laid out as the copied bytes (slot_bytes), then the output at
  // out_offset(): one allocation, so that one release and one detach cover both.
  std::size_t out_bytes = 0;
  // Measure how long the consumer's lane waits for each position (timing
  // events on a GPU): RingExecutor::idle().
  bool timed = false;
};

// An operation of a position, in the order its item passes them: to the
// device stage, copy, transform, ready, take, release; to the host mark,
// copy, ready, drain. A plan's operations of the other direction do nothing.
// Numbered in that order both ways: the engine's checker reads a position's
// steps in their order (an edge waits on an earlier step; a read comes after
// its group's earlier writes).
enum class Step : std::uint8_t { stage, mark, copy, transform, ready, take, release, drain };
inline constexpr std::size_t step_count = 8;
// Whether a step is one of the direction's.
bool in_direction(Step step, Direction direction);
std::string_view to_string(Step step);

// Where an operation runs: the host's staging threads, the copy lane (a copy
// stream), or the consumer's lane (its stream: to the host, where the
// caller's work makes what the ring carries).
enum class Lane : std::uint8_t { host, copy, consumer };
std::string_view to_string(Lane lane);

struct OpRef {
  std::size_t position = 0;
  Step step = Step::stage;
  friend constexpr bool operator==(const OpRef&, const OpRef&) = default;
  constexpr std::size_t index() const { return position * step_count + static_cast<std::size_t>(step); }
};

// Why an operation waits on another.
enum class Why : std::uint8_t {
  data,          // the position's previous operation made what this one uses
  ahead,         // the producer stays at most `ahead` positions beyond the consumer (to the host: beyond the drains)
  staging_slot,  // the staging slot's last reader (a copy) must be done with it
  device_slot,   // the device slot's last user (the consumer) must have released it
};
std::string_view to_string(Why why);

struct RingEdge {
  OpRef on;
  Why why = Why::data;
};

struct RingOp {
  OpRef ref;
  Lane lane = Lane::host;
  std::size_t item = 0;
  std::size_t device_slot = 0;
  std::size_t staging_slot = 0;  // stage and copy of a staged plan (to the host: copy and drain)
  std::size_t source_slot = 0;   // to the host: which of the `ahead` device sources the caller may have in flight
  // false: a stage of an unstaged plan, a transform of a plan without one, a
  // step of the other direction: does nothing
  bool active = true;
  std::array<RingEdge, 2> edges{};
  std::size_t edge_count = 0;
  const RingEdge* begin() const { return edges.data(); }
  const RingEdge* end() const { return edges.data() + edge_count; }
};

class RingPlan {
 public:
  // Throws std::invalid_argument, before any work, for no items, no steps,
  // ahead 0 or past most_ahead (sluice/core/ahead.hpp), held 0, fewer than ahead + held device slots, more staging
  // slots than device slots, a bounded ring's slot of 0 bytes,
  // a start past the last position, or an unbounded ring of layers or of
  // more than one step; to the host, also for device slots, a transform, an
  // order of layers, or more staging slots than ahead.
  explicit RingPlan(RingOptions options);

  const RingOptions& options() const { return o_; }
  std::size_t positions() const { return positions_; }
  std::size_t start() const { return o_.start; }
  std::size_t ahead() const { return o_.ahead; }
  std::size_t held() const { return o_.held; }
  bool unbounded() const { return o_.items == RingOptions::unbounded; }
  Direction direction() const { return o_.direction; }
  bool to_host() const { return o_.direction == Direction::to_host; }
  std::size_t slots() const { return slots_; }
  std::size_t staging_slots() const { return staging_; }
  bool staged() const { return o_.staged; }
  std::size_t slot_bytes() const { return o_.slot_bytes; }
  bool transformed() const { return o_.out_bytes > 0; }
  // Where a transform's output starts in a device slot (aligned for any type), and the slot's whole size.
  std::size_t out_offset() const { return transformed() ? (o_.slot_bytes + 255) / 256 * 256 : o_.slot_bytes; }
  std::size_t device_slot_bytes() const { return out_offset() + o_.out_bytes; }
  bool timed() const { return o_.timed; }

  // The item position `p` holds. Throws std::out_of_range past the last position.
  std::size_t item(std::size_t p) const;
  std::size_t device_slot(std::size_t p) const { return p % slots_; }
  std::size_t staging_slot(std::size_t p) const { return staging_ ? p % staging_ : 0; }
  // To the host: the device bytes of `ahead` positions at most are in flight.
  std::size_t source_slot(std::size_t p) const { return p % o_.ahead; }

  // One operation, derived from the rules above. Throws std::out_of_range past the last position.
  RingOp op(OpRef ref) const;
  RingOp op(std::size_t p, Step step) const { return op({p, step}); }

 private:
  void to_device_slots();
  void to_host_slots();
  template <typename Wait>
  void to_host_op(RingOp& op, Wait& wait) const;

  RingOptions o_;
  std::size_t positions_ = 0, slots_ = 0, staging_ = 0;
};

// EXPLAIN: the slots, then every operation of the first `shown` positions
// from the start (and the last one), one per line, with its lane, slots and edges.
std::string explain(const RingPlan& plan, std::size_t shown = 4);

}  // namespace sluice::ring
