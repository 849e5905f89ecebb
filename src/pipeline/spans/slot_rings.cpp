#include "slot_rings.hpp"

#include <stdexcept>
#include <string>

#include "core/host_memory.hpp"
#include "sluice/core/byte_size.hpp"

namespace sluice::detail {

namespace {

std::size_t shortfall(const std::vector<SlotMemory>& ring, std::size_t count, std::size_t bytes) {
  std::size_t missing = 0;
  for (std::size_t i = 0; i < count; ++i)
    if (i >= ring.size() || ring[i].bytes() < bytes) missing += bytes;
  return missing;
}

template <typename Allocate>
void grow(std::vector<SlotMemory>& ring, std::size_t count, std::size_t bytes, Allocate allocate) {
  if (ring.size() < count) ring.resize(count);
  for (std::size_t i = 0; i < count; ++i)
    if (ring[i].bytes() < bytes) ring[i] = allocate(bytes);
}

}  // namespace

SlotRings::Allocated SlotRings::prepare(const Schedule& s, Executor& executor) {
  const std::size_t spans = s.spans().size();
  device_.resize(spans);
  in_.resize(spans);
  out_.resize(spans);
  const std::size_t depth = s.ring_size(Ring::device);
  const std::size_t in_slots = s.ring_size(Ring::pinned_in), out_slots = s.ring_size(Ring::pinned_out);
  auto stages_in = [&](std::size_t k) { return s.spans()[k].host_pass() && s.spans()[k].copied_in(); };
  auto stages_out = [&](std::size_t k) { return s.spans()[k].host_pass() && s.spans()[k].copied_out(); };

  // What must be added, before anything is.
  Allocated needed;
  for (std::size_t k = 0; k < spans; ++k) {
    const std::size_t bytes = s.slot_bytes(k);
    needed.device += shortfall(device_[k], depth, bytes);
    if (stages_in(k)) needed.pinned += shortfall(in_[k], in_slots, bytes);
    if (stages_out(k)) needed.pinned += shortfall(out_[k], out_slots, bytes);
  }
  if (needed.device > 0) {
    const std::size_t free_bytes = executor.free_device_bytes();
    if (needed.device > free_bytes)
      throw std::invalid_argument("pipeline needs " + format_bytes(needed.device) + " more device memory (" +
                                  std::to_string(depth) + " slots of " + std::to_string(s.plan().chunk_items()) +
                                  " items for every span) but only " + format_bytes(free_bytes) +
                                  " are free: use a smaller chunk or depth");
  }
  if (needed.pinned > 0) {
    const std::size_t available = available_host_memory();
    if (available > 0 && needed.pinned > available / 2)
      throw std::invalid_argument("pipeline needs " + format_bytes(needed.pinned) +
                                  " more pinned staging memory, over half of the host's available " +
                                  format_bytes(available) + ": use a smaller chunk or depth");
  }

  if (needed.device > 0 || needed.pinned > 0) ++version_;
  for (std::size_t k = 0; k < spans; ++k) {
    const std::size_t bytes = s.slot_bytes(k);
    grow(device_[k], depth, bytes, [&](std::size_t b) { return executor.allocate_device(b); });
    if (stages_in(k)) grow(in_[k], in_slots, bytes, [&](std::size_t b) { return executor.allocate_pinned(b); });
    if (stages_out(k)) grow(out_[k], out_slots, bytes, [&](std::size_t b) { return executor.allocate_pinned(b); });
  }
  return needed;
}

void SlotRings::clear() {
  ++version_;
  device_.clear();
  in_.clear();
  out_.clear();
}

std::size_t SlotRings::pinned_bytes() const {
  std::size_t total = 0;
  for (const auto* rings : {&in_, &out_})
    for (const auto& ring : *rings)
      for (const auto& slot : ring) total += slot.bytes();
  return total;
}

}  // namespace sluice::detail
