#include "ring/block_layout.hpp"

#include <algorithm>

namespace sluice::ring {

BatchLayout lay_out(std::span<const HostPiece> pieces, std::size_t align) {
  BatchLayout layout;
  for (const HostPiece& piece : pieces) {
    layout.bytes = (layout.bytes + align - 1) / align * align;
    layout.offsets.push_back(layout.bytes);
    layout.bytes += piece.bytes;
  }
  layout.bytes = std::max<std::size_t>(layout.bytes, 1);  // an empty batch still takes a position
  return layout;
}

}  // namespace sluice::ring
