#pragma once
// Untyped entry points of a Pipeline for code that knows item types only at
// run time: the Python module and MultiPipeline (whose own entry point is in
// multigpu/multi_pipeline_access.hpp). Not part of the C++ API: C++ callers
// use the typed input()/output()/inout()/rebind(). Host-only.
#include <cstddef>
#include <cstdint>
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
  // Points span `span` at other memory with items of the same size, checked
  // as the typed rebind() checks a handle: `generation` is the one the span's
  // handle was made in (generation() when it was added), so a handle of
  // another pipeline, or of spans cleared since, is refused rather than
  // re-pointing whichever span now has its index; `writable` is whether the
  // memory may be written, so an output is never pointed at read-only memory.
  static void rebind_host(Pipeline& p, std::size_t span, std::uint64_t generation, const void* data, std::size_t items,
                          bool writable, std::shared_ptr<const void> owner = nullptr) {
    p.rebind_host(span, generation, data, items, writable, std::move(owner));
  }
  // The generation of the spans added now: what a handle carries to rebind_host.
  static std::uint64_t generation(const Pipeline& p) { return p.generation(); }
};

}  // namespace sluice::detail
