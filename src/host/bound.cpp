#include "sluice/bound.hpp"

#include <stdexcept>

namespace sluice {

Bound compute_bound(const StageCosts& c) {
  if (c.h2d_ms < 0 || c.kernel_ms < 0 || c.d2h_ms < 0 || c.h2d_bytes < 0 || c.d2h_bytes < 0 ||
      c.bidirectional_gbps < 0)
    throw std::invalid_argument("stage costs must not be negative");
  Bound bound{c.h2d_ms, "h2d"};
  if (c.kernel_ms > bound.ms) bound = {c.kernel_ms, "kernel"};
  if (c.d2h_ms > bound.ms) bound = {c.d2h_ms, "d2h"};
  if (c.bidirectional_gbps > 0) {
    const double link_ms = (c.h2d_bytes + c.d2h_bytes) / (c.bidirectional_gbps * 1e6);
    if (link_ms > bound.ms) bound = {link_ms, "link (both directions)"};
  }
  return bound;
}

}  // namespace sluice
