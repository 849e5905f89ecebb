#pragma once
// Untyped entry points of a Pipeline for code that knows item types only at
// run time: the Python module and MultiPipeline (whose own entry point is in
// multigpu/multi_pipeline_access.hpp). Not part of the C++ API: C++ callers
// use the typed input()/output()/inout()/rebind(). Host-only.
#include <cstddef>
#include <memory>
#include <utility>

#include "sluice/pipeline/pipeline.hpp"

namespace sluice::detail {

struct PipelineAccess {
  // Adds host memory as a span; returns its position (Chunk::device, Chunk::slots).
  // `owner`, when given, is held for as long as the span refers to the memory:
  // only memory the pipeline so keeps alive may stay page-locked between runs.
  static std::size_t add_host(Pipeline& p, const void* data, std::size_t items, std::size_t item_bytes, SpanRole role,
                              std::shared_ptr<const void> owner = nullptr) {
    return p.add_host(data, items, item_bytes, role, std::move(owner));
  }
  // Points span `span` at other memory with items of the same size.
  static void rebind_host(Pipeline& p, std::size_t span, const void* data, std::size_t items,
                          std::shared_ptr<const void> owner = nullptr) {
    p.rebind_host(span, p.generation(), data, items, true, std::move(owner));
  }
  static std::uint64_t generation(const Pipeline& p) { return p.generation(); }
};

}  // namespace sluice::detail
