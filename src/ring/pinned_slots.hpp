#pragma once
// Pinned staging slots that outlive the ring that used them. cudaFreeHost
// waits for the whole device, as cudaDeviceSynchronize does: a loader
// replaced mid training (Python's load_state_dict makes a new one) would
// stall every stream in the process. So the CUDA ring executor gives its
// staging slots back here, once its own copies out of them are done, and the
// next ring that asks for slots of the same size takes them.
//
// What is kept is bounded, but a slot given back is never freed there: a
// ring letting go would then wait for every stream of the process (a loader
// replaced while the step's stream is busy). Slots beyond the bound are
// freed when a ring next asks for a slot the cache lacks: a new allocation
// is made there anyway, so kept bytes stay within the bound plus the slots
// in use since. That free still stalls the process: while cudaFreeHost waits
// for the device, other threads' CUDA calls wait in the driver too (a
// consumer's take waited 20 s for another stream's work with no sluice lock
// held), so it is rare by design, not harmless.
#include <cstddef>

#include "sluice/core/pinned_buffer.hpp"

namespace sluice::detail {

// A pinned buffer of exactly `bytes`: a kept one, or a new one (after freeing
// what is kept beyond the bound, which waits for the device).
PinnedBuffer<std::byte> take_pinned_slot(std::size_t bytes);
// Keeps `slot` for a later take; no copy may still read or write it. Never
// frees, so never waits for the device.
void give_back_pinned_slot(PinnedBuffer<std::byte> slot) noexcept;
// Bytes kept now, and the bound beyond which a take frees (for tests).
std::size_t kept_pinned_bytes();
std::size_t kept_pinned_limit();

}  // namespace sluice::detail
