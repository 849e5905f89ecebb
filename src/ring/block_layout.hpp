#pragma once
// An item of several host pieces (a batch's tensors, a layer's weights) laid
// out in one block of a slot, each piece at an aligned offset: what the
// prefetcher and the streamed weights put on their rings. Host-only.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace sluice::ring {

struct HostPiece {
  const std::byte* data = nullptr;
  std::size_t bytes = 0;
  bool page_locked = false;  // read by the copy engine where it lies, with no staging
  // Where the same bytes can also be read from a file at fd_offset (a batch
  // in another process's shared memory: a DataLoader worker's), staging reads
  // them with pread and never touches `data`'s pages. Touching them maps each
  // page into this process (faults), and letting the batch go then tears the
  // mappings down across every thread's CPU: on a 16-core H100 machine that
  // cost a DataLoader of 8 workers a quarter of its rate; pread cost it 3-9 %.
  int fd = -1;
  std::uint64_t fd_offset = 0;
};

// Where each piece of a batch lies in its block, and the block's size.
struct BatchLayout {
  std::vector<std::size_t> offsets;
  std::size_t bytes = 0;
};
BatchLayout lay_out(std::span<const HostPiece> pieces, std::size_t align);

}  // namespace sluice::ring
