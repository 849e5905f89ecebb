#pragma once
// What the compute callable sees of one chunk: its place in the run, the
// stream to launch on, and each span's device memory through typed handles.
//
//   auto x = p.input(host_x);        // SpanHandle<const float>
//   auto y = p.output(host_y);       // SpanHandle<float>
//   p.compute([=](const sluice::Chunk& c) {
//     scale<<<blocks(c.size()), 256, 0, c.stream>>>(c[x].data(), c[y].data(), c.size());
//   });
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "sluice/core/stream_view.hpp"
#include "sluice/pipeline/chunk_plan.hpp"

namespace sluice {

class Pipeline;
class MultiPipeline;
namespace detail {
class Run;
}

// A span added to a pipeline, remembering its item type: const T for
// inputs, T for outputs and inout spans. Cheap to copy into a lambda.
template <typename T>
class SpanHandle {
 public:
  SpanHandle() = default;
  std::size_t index() const { return index_; }

 private:
  friend class Pipeline;
  friend class MultiPipeline;
  friend struct Chunk;
  SpanHandle(std::size_t index, std::uint64_t generation) : index_(index), generation_(generation) {}
  std::size_t index_ = 0;
  std::uint64_t generation_ = 0;  // which pipeline, and which set of spans in it
};

namespace detail {
// A new identity for a set of spans: handles remember it, chunks check it.
std::uint64_t new_span_generation();
}  // namespace detail

// One span's slot on the device for this chunk.
struct DeviceSlot {
  void* data = nullptr;
  std::size_t item_bytes = 0;
};

struct Chunk {
  std::size_t index = 0;  // 0 .. count - 1, in the order chunks enter the device
  std::size_t count = 0;  // chunks in this run
  ItemRange items;        // which items of the whole input this chunk holds
  StreamView stream;      // launch on this stream, and only this one (on the host executor: unused)
  std::span<const DeviceSlot> slots;  // one per span, in the order spans were added

  std::size_t size() const { return items.size(); }

  // The chunk's items of a span, in device memory. Throws std::logic_error for
  // a handle from another pipeline or from before clear_spans().
  template <typename T>
  std::span<T> operator[](SpanHandle<T> handle) const {
    if (handle.generation_ != generation_ || handle.index_ >= slots.size())
      throw std::logic_error("Chunk: span handle " + std::to_string(handle.index_) +
                             " belongs to another pipeline, or to spans cleared since it was made");
    return {static_cast<T*>(slots[handle.index_].data), size()};
  }

  // By position, for code that cannot keep handles (language bindings).
  // Throws std::logic_error when sizeof(T) is not the span's item size.
  template <typename T>
  T* device(std::size_t span) const {
    if (span >= slots.size())
      throw std::logic_error("Chunk::device: span " + std::to_string(span) + " does not exist (" +
                             std::to_string(slots.size()) + " spans)");
    if (slots[span].item_bytes != sizeof(T))
      throw std::logic_error("Chunk::device: span " + std::to_string(span) + " holds items of " +
                             std::to_string(slots[span].item_bytes) + " bytes, not " + std::to_string(sizeof(T)));
    return static_cast<T*>(slots[span].data);
  }

 private:
  // Only a pipeline makes chunks: the generation says whose handles fit.
  friend class detail::Run;
  friend class MultiPipeline;
  Chunk(std::size_t index_, std::size_t count_, ItemRange items_, StreamView stream_, std::span<const DeviceSlot> slots_,
        std::uint64_t generation)
      : index(index_), count(count_), items(items_), stream(stream_), slots(slots_), generation_(generation) {}
  std::uint64_t generation_ = 0;  // which pipeline, and which set of spans in it
};

}  // namespace sluice
