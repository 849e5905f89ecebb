#pragma once
// Spans that never touch pageable memory: a Source writes a chunk's items
// straight into the pipeline's pinned staging slot (reading a file,
// decoding, generating), a Sink reads a finished chunk straight out of its
// pinned slot (writing a file, encoding, checking). Host-only.
//
//   auto in  = p.input(sluice::from_file<float>("data.f32"));
//   auto out = p.output(sluice::consume<float>(n, [&](sluice::ItemRange r, std::span<const float> items) {...}));
//
// The pipeline calls them on its staging threads. A splittable source or
// sink is called for pieces of a chunk at once, from several threads (the
// file source and sink are); any other is called once per chunk, one call at
// a time, in chunk order. A sink always sees chunks in order, and a chunk's
// write starts only once the previous chunk's has finished, so when a run
// fails, nothing past the last finished chunk has been written.
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "sluice/chunk_plan.hpp"

namespace sluice {

class Source {
 public:
  virtual ~Source() = default;
  virtual std::size_t item_count() const = 0;
  virtual std::size_t item_bytes() const = 0;
  // For messages: "file data.f32", "producer".
  virtual std::string name() const = 0;
  virtual bool splittable() const { return false; }
  // Before a run's first chunk: check that the items are still there. Throws to refuse the run.
  virtual void begin_run() {}
  // Fills `pinned` (range.size() * item_bytes() bytes) with the items of `range`.
  virtual void read(ItemRange range, std::span<std::byte> pinned) = 0;
};

class Sink {
 public:
  virtual ~Sink() = default;
  virtual std::size_t item_count() const = 0;
  virtual std::size_t item_bytes() const = 0;
  virtual std::string name() const = 0;
  virtual bool splittable() const { return false; }
  virtual void begin_run() {}
  // Takes the items of `range` from `pinned`, which is reused once this returns.
  virtual void write(ItemRange range, std::span<const std::byte> pinned) = 0;
  // After the run: `items_done` items (a prefix) were written completely;
  // `completed` is false when the run failed. A file sink cuts the file there.
  virtual void end_run(bool /*completed*/, std::size_t /*items_done*/) {}
  virtual void commit() { end_run(true, item_count()); }
  virtual void abandon(std::size_t items_done) noexcept {
    try {
      end_run(false, items_done);
    } catch (...) {
    }
  }
};

// Typed handles for Pipeline::input/output: the item type travels with them.
template <typename T>
struct SourceOf {
  std::shared_ptr<Source> source;
};
template <typename T>
struct SinkOf {
  std::shared_ptr<Sink> sink;
};

namespace detail {
template <typename T, typename Fn>
class ProducerSource final : public Source {
 public:
  ProducerSource(std::size_t items, Fn fn, std::string name) : items_(items), fn_(std::move(fn)), name_(std::move(name)) {}
  std::size_t item_count() const override { return items_; }
  std::size_t item_bytes() const override { return sizeof(T); }
  std::string name() const override { return name_; }
  void read(ItemRange range, std::span<std::byte> pinned) override {
    fn_(range, std::span<T>(reinterpret_cast<T*>(pinned.data()), range.size()));
  }

 private:
  std::size_t items_;
  Fn fn_;
  std::string name_;
};

template <typename T, typename Fn>
class ConsumerSink final : public Sink {
 public:
  ConsumerSink(std::size_t items, Fn fn, std::string name) : items_(items), fn_(std::move(fn)), name_(std::move(name)) {}
  std::size_t item_count() const override { return items_; }
  std::size_t item_bytes() const override { return sizeof(T); }
  std::string name() const override { return name_; }
  void write(ItemRange range, std::span<const std::byte> pinned) override {
    fn_(range, std::span<const T>(reinterpret_cast<const T*>(pinned.data()), range.size()));
  }

 private:
  std::size_t items_;
  Fn fn_;
  std::string name_;
};
}  // namespace detail

// `fn(ItemRange range, std::span<T> items)` fills items with the range's values.
template <typename T, typename Fn>
SourceOf<T> produce(std::size_t items, Fn fn, std::string name = "producer") {
  static_assert(std::is_trivially_copyable_v<T>, "a source's items must be trivially copyable");
  static_assert(std::is_invocable_v<Fn&, ItemRange, std::span<T>>, "produce: fn(ItemRange, std::span<T>)");
  return {std::make_shared<detail::ProducerSource<T, Fn>>(items, std::move(fn), std::move(name))};
}

// `fn(ItemRange range, std::span<const T> items)` takes the range's results.
template <typename T, typename Fn>
SinkOf<T> consume(std::size_t items, Fn fn, std::string name = "consumer") {
  static_assert(std::is_trivially_copyable_v<T>, "a sink's items must be trivially copyable");
  static_assert(std::is_invocable_v<Fn&, ItemRange, std::span<const T>>, "consume: fn(ItemRange, std::span<const T>)");
  return {std::make_shared<detail::ConsumerSink<T, Fn>>(items, std::move(fn), std::move(name))};
}

}  // namespace sluice
