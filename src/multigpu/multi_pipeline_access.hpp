#pragma once
// The untyped entry point of a MultiPipeline, for the Python module, which
// knows item types only at run time. Not part of the C++ API: C++ callers use
// the typed input()/output()/inout(). Host-only.
#include <cstddef>

#include "sluice/multigpu/multi_pipeline.hpp"

namespace sluice::detail {

struct MultiPipelineAccess {
  // Adds host memory as a span; returns its position (Chunk::device, Chunk::slots).
  static std::size_t add_host(MultiPipeline& p, const void* data, std::size_t items, std::size_t item_bytes,
                              SpanRole role) {
    return p.add(data, items, item_bytes, role);
  }
};

}  // namespace sluice::detail
