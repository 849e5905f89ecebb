#pragma once
// Pinned slots that outlive the loader that used them. cudaFreeHost waits
// for the whole device, as cudaDeviceSynchronize does: a loader replaced mid
// training (Python's load_state_dict makes a new one) would stall every
// stream in the process. So a loader gives its pinned slots back here, once
// its own copies out of them are done, and the next loader that asks for
// slots of the same size takes them. What is kept is bounded; beyond that,
// slots are freed (and the device waits, rarely).
#include <cstddef>

#include "sluice/core/pinned_buffer.hpp"

namespace sluice::detail {

// A pinned buffer of exactly `bytes`: a kept one, or a new one.
PinnedBuffer<std::byte> take_pinned_slot(std::size_t bytes);
// Keeps `slot` for a later take; no copy may still read or write it.
void give_back_pinned_slot(PinnedBuffer<std::byte> slot) noexcept;
// Bytes kept now (for tests).
std::size_t kept_pinned_bytes();

}  // namespace sluice::detail
