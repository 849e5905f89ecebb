#include "sluice/pipeline/schedule.hpp"

#include <algorithm>
#include <stdexcept>

#include "chunking.hpp"

namespace sluice {

namespace {

// Stage-in runs up to 24 MiB ahead of the H2D copies, in 3 to 6 pinned
// slots per span (chunking.hpp has the measurements): stage-out jobs go
// first whenever a D2H has finished, so stage-in falls behind in bursts;
// 24 MiB of lead absorbs them, 48 MiB spills the slots out of the cache.
constexpr std::size_t stage_in_lead_bytes = std::size_t{24} << 20;
std::size_t stage_in_slots(std::size_t chunk_bytes) {
  constexpr std::size_t fewest = 3, most = 6;  // one filling, one ready, one being copied
  return std::clamp(stage_in_lead_bytes / std::max<std::size_t>(chunk_bytes, 1), fewest, most);
}

// The drain reads a chunk's events after the driver recorded them; a set is
// reused once the drain is done with it. With few sets and short chunks the
// driver would stall behind the drain's wake-ups and leave the GPU idle:
// events are cheap, 32 sets absorb that.
std::size_t event_sets(std::size_t depth) { return std::max<std::size_t>(2 * depth + 4, 32); }

}  // namespace

std::string_view to_string(HostPath path) {
  switch (path) {
    case HostPath::direct: return "direct";
    case HostPath::staged: return "staged";
    case HostPath::source: return "source";
    case HostPath::sink: return "sink";
  }
  return "unknown";
}

std::string_view to_string(Stage stage) {
  switch (stage) {
    case Stage::stage_in: return "stage-in";
    case Stage::h2d: return "h2d";
    case Stage::compute: return "compute";
    case Stage::d2h: return "d2h";
    case Stage::stage_out: return "stage-out";
  }
  return "unknown";
}

std::string_view to_string(Ring ring) {
  switch (ring) {
    case Ring::pinned_in: return "pinned-in";
    case Ring::device: return "device";
    case Ring::pinned_out: return "pinned-out";
    case Ring::event_set: return "events";
  }
  return "unknown";
}

std::string_view to_string(Reason reason) {
  switch (reason) {
    case Reason::data: return "data";
    case Reason::pinned_in_slot: return "pinned-in slot";
    case Reason::device_slot: return "device slot";
    case Reason::pinned_out_slot: return "pinned-out slot";
    case Reason::event_set: return "event set";
  }
  return "unknown";
}

Schedule::Schedule(ScheduleInput input) : in_(std::move(input)) {
  if (in_.spans.empty()) throw std::invalid_argument("schedule: no spans");
  if (in_.depth == 0) throw std::invalid_argument("pipeline depth must be at least 1");
  if (in_.compute_streams == 0) throw std::invalid_argument("schedule: no compute stream");
  std::size_t widest = 0;
  for (const SpanShape& s : in_.spans) {
    if (s.item_bytes == 0) throw std::invalid_argument("span items must be at least 1 byte");
    widest = std::max(widest, s.item_bytes);
    if (s.copied_in()) in_item_bytes_ += s.item_bytes;
    if (s.copied_out()) out_item_bytes_ += s.item_bytes;
    stages_in_ |= s.host_pass() && s.copied_in();
    stages_out_ |= s.host_pass() && s.copied_out();
  }
  auto& r = rings_;
  r[static_cast<std::size_t>(Ring::device)] = in_.depth;
  r[static_cast<std::size_t>(Ring::pinned_in)] = stages_in_ ? stage_in_slots(in_.plan.chunk_items() * widest) : 0;
  // D2H may run this far ahead of the drain that empties the pinned slots.
  r[static_cast<std::size_t>(Ring::pinned_out)] = stages_out_ ? in_.depth + 1 : 0;
  r[static_cast<std::size_t>(Ring::event_set)] = event_sets(in_.depth);
}

std::size_t Schedule::last_h2d_with(std::size_t chunk) const {
  // A copy ahead would wait for its staging, and hold up this chunk's kernel.
  if (stages_in_) return chunk;
  return std::min(chunk_count() - 1, chunk + (in_.depth - 1));
}

std::vector<OpRef> Schedule::submission_order() const {
  std::vector<OpRef> order;
  order.reserve(3 * chunk_count());
  std::size_t h2d_next = 0;
  for (std::size_t c = 0; c < chunk_count(); ++c) {
    for (; h2d_next <= last_h2d_with(c); ++h2d_next) order.push_back({h2d_next, Stage::h2d});
    order.push_back({c, Stage::compute});
    order.push_back({c, Stage::d2h});
  }
  return order;
}

Op Schedule::op(OpRef ref) const {
  const std::size_t c = ref.chunk;
  if (c >= chunk_count()) throw std::out_of_range("schedule: chunk " + std::to_string(c) + " past the last");
  Op op;
  op.ref = ref;
  op.items = in_.plan.chunk(c);
  const std::size_t items = op.items.size();
  const std::size_t events = slot(Ring::event_set, c);
  auto earlier = [c](std::size_t back) { return c >= back; };
  switch (ref.stage) {
    case Stage::stage_in:
      op.lane = Lane::stage_in;
      op.active = stages_in_;
      if (!op.active) break;
      for (const SpanShape& s : in_.spans)
        if (s.host_pass() && s.copied_in()) op.bytes += items * s.item_bytes;
      op.slots.push({Ring::pinned_in, slot(Ring::pinned_in, c), Access::write});
      if (earlier(ring_size(Ring::pinned_in)))
        op.waits.push({{c - ring_size(Ring::pinned_in), Stage::h2d}, Reason::pinned_in_slot});
      break;
    case Stage::h2d:
      op.lane = Lane::h2d;
      op.bytes = items * in_item_bytes_;
      op.active = in_item_bytes_ > 0;
      op.after_caller = c == 0 && in_.caller_stream;
      if (stages_in_) {
        op.slots.push({Ring::pinned_in, slot(Ring::pinned_in, c), Access::read});
        op.waits.push({{c, Stage::stage_in}, Reason::data});
      }
      if (op.active) op.slots.push({Ring::device, slot(Ring::device, c), Access::write});
      op.slots.push({Ring::event_set, events, Access::write});
      if (earlier(in_.depth)) op.waits.push({{c - in_.depth, Stage::d2h}, Reason::device_slot});
      if (earlier(ring_size(Ring::event_set)))
        op.waits.push({{c - ring_size(Ring::event_set), Stage::stage_out}, Reason::event_set});
      break;
    case Stage::compute:
      op.lane = Lane::compute;
      op.stream = static_cast<unsigned>(c % in_.compute_streams);
      op.slots.push({Ring::device, slot(Ring::device, c), Access::read_write});
      op.slots.push({Ring::event_set, events, Access::write});
      op.waits.push({{c, Stage::h2d}, Reason::data});
      break;
    case Stage::d2h:
      op.lane = Lane::d2h;
      op.bytes = items * out_item_bytes_;
      op.active = out_item_bytes_ > 0;
      if (op.active) op.slots.push({Ring::device, slot(Ring::device, c), Access::read});
      if (stages_out_) op.slots.push({Ring::pinned_out, slot(Ring::pinned_out, c), Access::write});
      op.slots.push({Ring::event_set, events, Access::write});
      op.waits.push({{c, Stage::compute}, Reason::data});
      if (stages_out_ && earlier(ring_size(Ring::pinned_out)))
        op.waits.push({{c - ring_size(Ring::pinned_out), Stage::stage_out}, Reason::pinned_out_slot});
      break;
    case Stage::stage_out:
      op.lane = Lane::stage_out;
      op.active = stages_out_;  // inactive, it still finishes the chunk and frees its event set
      for (const SpanShape& s : in_.spans)
        if (s.host_pass() && s.copied_out()) op.bytes += items * s.item_bytes;
      if (stages_out_) op.slots.push({Ring::pinned_out, slot(Ring::pinned_out, c), Access::read});
      op.slots.push({Ring::event_set, events, Access::read});
      op.waits.push({{c, Stage::d2h}, Reason::data});
      break;
  }
  return op;
}

Schedule plan_schedule(const PipelineOptions& options, std::vector<SpanShape> spans, std::size_t items,
                       bool caller_stream, bool kernel_bound, bool replayed) {
  std::size_t widest = 1;
  bool host_in = false, host_out = false;
  for (const SpanShape& s : spans) {
    widest = std::max(widest, s.item_bytes);
    host_in |= s.host_pass() && s.copied_in();
    host_out |= s.host_pass() && s.copied_out();
  }
  ScheduleInput in;
  in.plan = plan_chunks(options, items, widest,
                        {.host_copies_both_ways = host_in && host_out, .kernel_bound = kernel_bound, .replayed = replayed});
  in.spans = std::move(spans);
  in.depth = options.depth;
  in.compute_streams = compute_stream_count(options);
  in.caller_stream = caller_stream;
  return Schedule(std::move(in));
}

}  // namespace sluice
