// Device slots, pinned staging slots and event sets. They are kept across
// runs and grow only when a run needs more: allocating pinned memory costs
// milliseconds, and a pipeline run over and over on data of one shape should
// pay for it once. Device and pinned totals are checked before anything is
// allocated, so a run that cannot fit is refused before any work.
#include <stdexcept>
#include <string>

#include "engine.hpp"
#include "host_memory.hpp"
#include "sluice/byte_size.hpp"
#include "sluice/chunking.hpp"
#include "sluice/error.hpp"

namespace sluice {

namespace {

template <typename Buffer>
std::size_t shortfall(const std::vector<Buffer>& slots, std::size_t count, std::size_t bytes) {
  std::size_t missing = 0;
  for (std::size_t i = 0; i < count; ++i)
    if (i >= slots.size() || slots[i].bytes() < bytes) missing += bytes;
  return missing;
}

}  // namespace

unsigned Pipeline::Engine::staging_thread_count() const {
  return options.staging_threads > 0 ? options.staging_threads : StagingPool::default_thread_count();
}

StagingPool& Pipeline::Engine::registration_queue() {
  if (!registrar) registrar = std::make_unique<StagingPool>(1);
  return *registrar;
}

StagingPool& Pipeline::Engine::staging_pool() {
  if (!pool) pool = std::make_unique<StagingPool>(staging_thread_count());
  return *pool;
}

Pipeline::Engine::Allocated Pipeline::Engine::prepare(std::size_t chunk_items) {
  const std::size_t count = spans.size();
  in_slot_count = stage_in_slots(chunk_items * widest_item());
  device_slots.resize(count);
  pinned_in.resize(count);
  pinned_out.resize(count);

  // What must be added, before anything is.
  std::size_t device_needed = 0, pinned_needed = 0;
  for (std::size_t k = 0; k < count; ++k) {
    const auto& s = spans[k];
    const std::size_t bytes = chunk_items * s.item_bytes;
    device_needed += shortfall(device_slots[k], depth(), bytes);
    if (s.host_pass() && s.copied_in()) pinned_needed += shortfall(pinned_in[k], in_slots(), bytes);
    if (s.host_pass() && s.copied_out()) pinned_needed += shortfall(pinned_out[k], out_slots(), bytes);
  }
  if (device_needed > 0) {
    std::size_t free_bytes = 0, total_bytes = 0;
    SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (device_needed > free_bytes)
      throw std::invalid_argument("pipeline needs " + format_bytes(device_needed) + " more device memory (" +
                                  std::to_string(depth()) + " slots of " + std::to_string(chunk_items) +
                                  " items for every span) but only " + format_bytes(free_bytes) +
                                  " are free: use a smaller chunk or depth");
  }
  if (pinned_needed > 0) {
    const std::size_t available = detail::available_host_memory();
    if (available > 0 && pinned_needed > available / 2)
      throw std::invalid_argument("pipeline needs " + format_bytes(pinned_needed) +
                                  " more pinned staging memory, over half of the host's available " +
                                  format_bytes(available) + ": use a smaller chunk or depth");
  }

  for (std::size_t k = 0; k < count; ++k) {
    const auto& s = spans[k];
    const std::size_t bytes = chunk_items * s.item_bytes;
    auto& ring = device_slots[k];
    ring.resize(std::max(ring.size(), depth()));
    for (std::size_t i = 0; i < depth(); ++i)
      if (ring[i].bytes() < bytes) ring[i] = DeviceBuffer<std::byte>(bytes, h2d.view());
    auto grow_pinned = [bytes](std::vector<PinnedBuffer<std::byte>>& slots, std::size_t n) {
      slots.resize(std::max(slots.size(), n));
      for (std::size_t i = 0; i < n; ++i)
        if (slots[i].bytes() < bytes) slots[i] = PinnedBuffer<std::byte>(bytes);
    };
    if (s.host_pass() && s.copied_in()) grow_pinned(pinned_in[k], in_slots());
    if (s.host_pass() && s.copied_out()) grow_pinned(pinned_out[k], out_slots());
  }
  if (device_needed > 0) h2d.synchronize();  // the new slots exist before any stream uses them

  const bool timed = options.record || options.report_bound;
  if (events.size() != event_sets() || events_timed != timed) {
    events.clear();
    const auto timing = timed ? Event::Timing::enabled : Event::Timing::disabled;
    for (std::size_t i = 0; i < event_sets(); ++i) events.emplace_back(timing);
    events_timed = timed;
  }
  bool host_pass = false;
  for (const auto& s : spans) host_pass |= s.host_pass();
  if (host_pass) staging_pool();
  return {device_needed, pinned_needed};
}

}  // namespace sluice
