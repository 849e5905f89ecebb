#pragma once
// SplitMix64's finaliser: a reproducible, well-mixed 64-bit value for every
// input, for orders and jitter that a seed decides (a batch plan's shuffle,
// the host executors' pauses, test data). Host-only.
#include <cstdint>

namespace sluice::detail {

constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace sluice::detail
