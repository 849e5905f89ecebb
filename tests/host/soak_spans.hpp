#pragma once
// Spans of any item type and any kind of memory, for the soak
// (test_soak.cpp): each adds itself to a pipeline, fills its inputs for a
// run, reads and writes its items for the compute callable, and checks what
// a run left. Item values come from (run seed, item index), so an item that
// lands in the wrong place, the wrong run or not at all is seen. Host-only.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "run_probes.hpp"
#include "sluice/pipeline/host_executor.hpp"
#include "sluice/pipeline/pipeline.hpp"

namespace sluice::test {

// Where a span's items live.
enum class Memory {
  pageable,    // a std::vector: staged, or page-locked for the run, as the policy says
  pinned,      // HostExecutor::allocate_pinned: copied directly
  registered,  // a std::vector the caller page-locks (HostExecutor::register_memory): copied directly
  source,      // a Source (inputs)
  sink,        // a Sink (outputs)
};
inline const char* name(Memory m) {
  static const char* names[] = {"pageable", "pinned", "registered", "source", "sink"};
  return names[static_cast<int>(m)];
}
inline const char* name(SpanRole r) { return r == SpanRole::input ? "in" : r == SpanRole::output ? "out" : "inout"; }

// Items wider than a machine word, whose every byte is checked.
struct Wide12 {
  std::uint32_t a, b, c;
};
struct Wide40 {
  std::uint64_t v[5];
};

template <typename T>
T encode(std::uint64_t v) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(v);
  } else if constexpr (std::is_same_v<T, Wide12>) {
    return {static_cast<std::uint32_t>(v), static_cast<std::uint32_t>(v >> 32), static_cast<std::uint32_t>(v * 3)};
  } else {
    return {{v, ~v, v * 5, v ^ 0x5555555555555555ull, v + 1}};
  }
}
template <typename T>
std::uint64_t decode(const T& x) {
  if constexpr (std::is_integral_v<T>) {
    return x;
  } else if constexpr (std::is_same_v<T, Wide12>) {
    return x.a | (std::uint64_t{x.b} << 32);
  } else {
    return x.v[0];
  }
}
template <typename T>
bool same_bytes(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// The values the compute callable writes to the `writer`-th written span.
inline std::uint64_t written_value(std::uint64_t sum, std::size_t writer) { return sum * (writer + 3) + 1; }

class SoakSpan {
 public:
  SoakSpan(SpanRole role, Memory memory) : role_(role), memory_(memory) {}
  virtual ~SoakSpan() = default;
  SpanRole role() const { return role_; }
  Memory memory() const { return memory_; }
  bool read() const { return role_ != SpanRole::output; }
  bool written() const { return role_ != SpanRole::input; }
  bool host_memory() const { return memory_ != Memory::source && memory_ != Memory::sink; }
  virtual std::size_t item_bytes() const = 0;
  std::string text() const {
    return std::string(name(role_)) + " " + name(memory_) + " " + std::to_string(item_bytes()) + "B";
  }

  virtual void add_to(Pipeline& p) = 0;
  // Host memory spans: new memory of `items` items, and the pipeline pointed at it.
  virtual void rebind(Pipeline& p, std::size_t items) = 0;
  // Before a run: inputs get this run's values, outputs the poison.
  virtual void prepare(std::uint64_t seed) = 0;
  // The compute callable's side.
  virtual void add_inputs(const Chunk& c, std::vector<std::uint64_t>& sums) const = 0;
  virtual void store(const Chunk& c, const std::vector<std::uint64_t>& sums, std::size_t writer) const = 0;
  // What the compute callable read at item i: this run's value as the item type keeps it.
  virtual std::uint64_t input_value(std::size_t i) const = 0;
  // After a run that went through: every written item right, a sink written in order and committed once.
  virtual ::testing::AssertionResult check(const std::vector<std::uint64_t>& sums, std::size_t writer) const = 0;
  // Page-locked ranges the caller holds for it.
  virtual std::size_t registrations() const = 0;
  // Sources and sinks: the call covering `item` throws (nullopt: none does).
  virtual void fail_at(std::optional<std::size_t> item) = 0;

 private:
  SpanRole role_;
  Memory memory_;
};

template <typename T>
class TypedSpan final : public SoakSpan {
 public:
  TypedSpan(SpanRole role, Memory memory, HostExecutor& host, std::size_t count)
      : SoakSpan(role, memory), host_(host), items_(count) {
    if (memory == Memory::source) {
      source_ = std::make_shared<Source>(count, [this](std::size_t i) { return encode<T>(item_value(seed_, i)); });
    } else if (memory == Memory::sink) {
      sink_ = std::make_shared<RecordingSink<T>>(count);
    } else {
      allocate(count);
    }
  }
  ~TypedSpan() override { registration_ = {}; }  // before the memory it covers goes

  std::size_t item_bytes() const override { return sizeof(T); }

  void add_to(Pipeline& p) override {
    if (source_) {
      in_ = p.input(SourceOf<T>{source_});
    } else if (sink_) {
      out_ = p.output(SinkOf<T>{sink_});
    } else if (role() == SpanRole::input) {
      in_ = p.input(items());
    } else if (role() == SpanRole::output) {
      out_ = p.output(items());
    } else {
      out_ = p.inout(items());
    }
  }

  void rebind(Pipeline& p, std::size_t count) override {
    allocate(count);
    if (role() == SpanRole::input)
      p.rebind(in_, items());
    else
      p.rebind(out_, items());
  }

  void prepare(std::uint64_t seed) override {
    seed_ = seed;
    T poison;
    std::memset(&poison, 0xA5, sizeof poison);
    if (sink_) sink_->reset(poison);
    if (!host_memory()) return;
    const std::span<T> view = items();
    for (std::size_t i = 0; i < view.size(); ++i) view[i] = read() ? encode<T>(item_value(seed, i)) : poison;
  }

  void add_inputs(const Chunk& c, std::vector<std::uint64_t>& sums) const override {
    if (!read()) return;
    const std::span<const T> in = role() == SpanRole::inout ? std::span<const T>(c[out_]) : c[in_];
    for (std::size_t i = 0; i < in.size(); ++i) sums[i] += decode(in[i]);
  }

  void store(const Chunk& c, const std::vector<std::uint64_t>& sums, std::size_t writer) const override {
    const std::span<T> out = c[out_];
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = encode<T>(written_value(sums[i], writer));
  }

  std::uint64_t input_value(std::size_t i) const override { return decode(encode<T>(item_value(seed_, i))); }

  ::testing::AssertionResult check(const std::vector<std::uint64_t>& sums, std::size_t writer) const override {
    const std::vector<T>* sunk = sink_ ? &sink_->pending : nullptr;
    const std::span<const T> got = sunk ? std::span<const T>(*sunk) : std::span<const T>(items());
    if (got.size() != sums.size()) return ::testing::AssertionFailure() << text() << ": " << got.size() << " items";
    for (std::size_t i = 0; i < got.size(); ++i)
      if (!same_bytes(got[i], encode<T>(written_value(sums[i], writer))))
        return ::testing::AssertionFailure() << text() << ": item " << i << " of " << got.size() << " is wrong";
    if (sink_) {
      if (contiguous_end(sink_->writes) != std::optional<std::size_t>(items_))
        return ::testing::AssertionFailure() << text() << ": writes out of order or missing";
      if (sink_->commits != 1 || !sink_->abandons.empty() || sink_->begun != 1)
        return ::testing::AssertionFailure() << text() << ": begun " << sink_->begun << ", committed " << sink_->commits
                                             << ", abandoned " << sink_->abandons.size() << " times";
    }
    return ::testing::AssertionSuccess();
  }

  std::size_t registrations() const override { return locked_; }

  void fail_at(std::optional<std::size_t> item) override {
    if (source_) source_->fail_at = item;
    if (sink_) sink_->fail_at = item;
  }

 private:
  using Source = PatternSource<T, std::function<T(std::size_t)>>;

  std::span<T> items() const {
    return memory() == Memory::pinned ? pinned_.as<T>() : std::span<T>(const_cast<std::vector<T>&>(vector_));
  }

  void allocate(std::size_t count) {
    registration_ = {};  // the caller unlocks before it frees
    locked_ = 0;
    items_ = count;
    if (memory() == Memory::pinned) {
      pinned_ = host_.allocate_pinned(count * sizeof(T));
      return;
    }
    std::vector<T>(count).swap(vector_);  // new memory, not the old capacity
    if (memory() == Memory::registered && count > 0) {
      // Pages a neighbour has locked already are left as they are: count what this one adds.
      const std::size_t before = host_.holdings().locked_ranges;
      registration_ = host_.register_memory(vector_.data(), count * sizeof(T));
      locked_ = host_.holdings().locked_ranges - before;
    }
  }

  HostExecutor& host_;
  std::size_t items_;
  std::uint64_t seed_ = 0;
  std::size_t locked_ = 0;
  std::vector<T> vector_;
  HostExecutor::Buffer pinned_;
  HostExecutor::Registration registration_;
  std::shared_ptr<Source> source_;
  std::shared_ptr<RecordingSink<T>> sink_;
  SpanHandle<const T> in_;
  SpanHandle<T> out_;
};

}  // namespace sluice::test
