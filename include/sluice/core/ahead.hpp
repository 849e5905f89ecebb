#pragma once
// How far ahead of its consumer a product's producer may run: a loader's or a
// prefetcher's batches, streamed layers, offloaded activations. Each position
// ahead is a slot of memory in flight, so the lead is bounded: a typo
// (ahead=1000) is refused before it takes a thousand slots.
#include <cstddef>

namespace sluice {

inline constexpr std::size_t most_ahead = 30;

}  // namespace sluice
