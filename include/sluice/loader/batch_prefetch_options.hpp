#pragma once
// BatchPrefetcher's options (batch_prefetcher.hpp): where their defaults are
// written, for the C++ class, the ring under it and the Python Prefetcher.
#include <cstddef>
#include <optional>

namespace sluice {

struct BatchPrefetchOptions {
  std::size_t ahead = 2;    // batches on their way beyond the ones the consumer holds (1 .. most_ahead)
  std::size_t held = 2;     // batches the consumer holds: the last one, and the one before while the loop moves on
  unsigned threads = 0;     // staging threads; 0: two fewer than the hardware threads (all on 4 or fewer)
  std::size_t staging = 2;  // page-locked staging slots: one filled while the copy reads the other
  std::size_t align = 256;  // of each piece's offset in the block
  // none: the device current at construction (initialised, so that {.ahead = 3} draws no -Wextra warning)
  std::optional<int> device = std::nullopt;
};

}  // namespace sluice
