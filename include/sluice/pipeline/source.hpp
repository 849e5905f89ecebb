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
// write starts only once the previous chunk's has finished.
//
// A run is a transaction for its sinks: every sink's begin_run() comes before
// the first chunk is written, and the run ends in commit() on every sink when
// every chunk was written, or in abandon() when the run failed or was refused.
// A sink changes what a reader of its output sees only at commit(), so that a
// run that fails, is refused or is killed leaves the previous output as it
// was: the file sink writes a new file beside its target and renames it over
// the target once the new file is complete and synced.
#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "sluice/pipeline/chunk_plan.hpp"

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
  // For messages: "file out.f32", "consumer".
  virtual std::string name() const = 0;
  virtual bool splittable() const { return false; }
  // Before a run's first chunk, called for every sink of the run before any chunk is written:
  // get ready to take the run's items without changing what a reader of the output sees (a file
  // sink creates its new file beside the target). Throws to refuse the run.
  virtual void begin_run() {}
  // Takes the items of `range` from `pinned`, which is reused once this returns.
  virtual void write(ItemRange range, std::span<const std::byte> pinned) = 0;
  // After every chunk was written: make the run's output what readers see (a file sink syncs its
  // new file, renames it over the target, syncs the directory). Throws (IoError for files) when it
  // cannot: the run then fails, and the previous output must still be there. The pipeline then
  // abandons this sink and those not yet committed; sinks that committed before it stay
  // committed (a run's outputs are replaced one by one, not all at once).
  virtual void commit() {}
  // The run failed, or was refused after begin_run: put things back as they were before begin_run
  // (a file sink removes its new file). `items_done` items (a prefix, in chunk order) had been
  // written. Must not throw (report what it could not undo on stderr).
  virtual void abandon(std::size_t /*items_done*/) noexcept {}
};

// What a consumer is told about the end of its run; either may be left empty. `abandon` must not
// throw: what it throws is reported on stderr and dropped, as the run's own failure comes first.
struct ConsumerRunEnd {
  std::function<void()> commit = nullptr;               // every item was consumed: the results are final
  std::function<void(std::size_t items_done)> abandon = nullptr;  // the run failed: only the first `items_done` count
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
  ConsumerSink(std::size_t items, Fn fn, ConsumerRunEnd end, std::string name)
      : items_(items), fn_(std::move(fn)), end_(std::move(end)), name_(std::move(name)) {}
  std::size_t item_count() const override { return items_; }
  std::size_t item_bytes() const override { return sizeof(T); }
  std::string name() const override { return name_; }
  void write(ItemRange range, std::span<const std::byte> pinned) override {
    fn_(range, std::span<const T>(reinterpret_cast<const T*>(pinned.data()), range.size()));
  }
  void commit() override {
    if (end_.commit) end_.commit();
  }
  void abandon(std::size_t items_done) noexcept override {
    if (!end_.abandon) return;
    try {
      end_.abandon(items_done);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sluice: %s: abandoning a failed run threw: %s\n", name_.c_str(), e.what());
    } catch (...) {
      std::fprintf(stderr, "sluice: %s: abandoning a failed run threw\n", name_.c_str());
    }
  }

 private:
  std::size_t items_;
  Fn fn_;
  ConsumerRunEnd end_;
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

// `fn(ItemRange range, std::span<const T> items)` takes the range's results;
// `end` hears whether the run committed them or abandoned them.
template <typename T, typename Fn>
SinkOf<T> consume(std::size_t items, Fn fn, ConsumerRunEnd end, std::string name = "consumer") {
  static_assert(std::is_trivially_copyable_v<T>, "a sink's items must be trivially copyable");
  static_assert(std::is_invocable_v<Fn&, ItemRange, std::span<const T>>, "consume: fn(ItemRange, std::span<const T>)");
  return {std::make_shared<detail::ConsumerSink<T, Fn>>(items, std::move(fn), std::move(end), std::move(name))};
}

template <typename T, typename Fn>
SinkOf<T> consume(std::size_t items, Fn fn, std::string name = "consumer") {
  return consume<T>(items, std::move(fn), ConsumerRunEnd{}, std::move(name));
}

}  // namespace sluice
