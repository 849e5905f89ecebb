#include "span_mix.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>

namespace sluice::test {

namespace {

using K = SpanKind;

// Whole numbers below 2^24: every sum and product below is exact in float,
// whatever order or instructions compute it.
float input_value(std::size_t input, std::size_t item) {
  return static_cast<float>((item * 7919 + input * 104729) % 1009 + 1);
}
float inout_first(std::size_t inout, std::size_t item) { return static_cast<float>((item * 31 + inout * 17) % 523 + 2); }
float input_sum(std::size_t inputs, std::size_t item) {
  float sum = 0;
  for (std::size_t j = 0; j < inputs; ++j) sum += static_cast<float>(j + 1) * input_value(j, item);
  return sum;
}
float output_value(std::size_t output, float sum) { return static_cast<float>(output + 2) * sum + static_cast<float>(output); }
float inout_value(float first, float sum) { return first * 2 + 1 + sum; }

bool is_source(K k) { return k == K::source || k == K::split_source; }
bool is_sink(K k) { return k == K::sink || k == K::split_sink; }

// Calls of a source or sink, as it saw them: items touched once each, and
// calls one at a time in chunk order where it is not splittable.
class CallLog {
 public:
  CallLog(std::size_t items, bool split) : split_(split), touched_(items) {}
  void reset() {
    std::fill(touched_.begin(), touched_.end(), 0);
    next_ = 0;
    disorder_ = false;
    begun_ = ended_ = 0;
  }
  // Around one call for `range`.
  void enter(ItemRange range) {
    if (split_) return;
    if (++inside_ > 1) disorder_ = true;
    if (range.begin != next_.exchange(range.end)) disorder_ = true;
  }
  void leave() {
    if (!split_) --inside_;
  }
  void touch(std::size_t item) { ++touched_[item]; }
  bool touched_once(std::size_t from, std::size_t to) const {
    return std::all_of(touched_.begin() + static_cast<std::ptrdiff_t>(from),
                       touched_.begin() + static_cast<std::ptrdiff_t>(to), [](std::uint8_t n) { return n == 1; });
  }
  ::testing::AssertionResult right(const std::string& what) const {
    if (disorder_) return ::testing::AssertionFailure() << what << " was called out of chunk order, or twice at once";
    if (!touched_once(0, touched_.size()))
      return ::testing::AssertionFailure() << what << " was not asked for every item exactly once";
    if (begun_ != 1) return ::testing::AssertionFailure() << what << " began " << begun_ << " times in one run";
    return ::testing::AssertionSuccess();
  }
  std::atomic<int> begun_{0}, ended_{0};

 private:
  bool split_;
  std::vector<std::uint8_t> touched_;  // pieces of a split call touch disjoint items
  std::atomic<int> inside_{0};
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> disorder_{false};
};

}  // namespace

class GeneratedSource final : public Source {
 public:
  GeneratedSource(std::size_t input, std::size_t items, bool split)
      : input_(input), items_(items), split_(split), log_(items, split) {}
  std::size_t item_count() const override { return items_; }
  std::size_t item_bytes() const override { return sizeof(float); }
  std::string name() const override { return "generated input " + std::to_string(input_); }
  bool splittable() const override { return split_; }
  void begin_run() override { ++log_.begun_; }
  void read(ItemRange range, std::span<std::byte> pinned) override {
    log_.enter(range);
    auto* out = reinterpret_cast<float*>(pinned.data());
    for (std::size_t i = range.begin; i < range.end; ++i) {
      out[i - range.begin] = input_value(input_, i);
      log_.touch(i);
    }
    log_.leave();
  }
  void reset() { log_.reset(); }
  ::testing::AssertionResult right() const { return log_.right(name()); }

 private:
  std::size_t input_, items_;
  bool split_;
  CallLog log_;
};

class CollectingSink final : public Sink {
 public:
  CollectingSink(std::size_t output, std::size_t items, bool split)
      : output_(output), items_(items), split_(split), values_(items), log_(items, split) {}
  std::size_t item_count() const override { return items_; }
  std::size_t item_bytes() const override { return sizeof(float); }
  std::string name() const override { return "collected output " + std::to_string(output_); }
  bool splittable() const override { return split_; }
  void begin_run() override { ++log_.begun_; }
  void write(ItemRange range, std::span<const std::byte> pinned) override {
    log_.enter(range);
    std::memcpy(values_.data() + range.begin, pinned.data(), range.size() * sizeof(float));
    for (std::size_t i = range.begin; i < range.end; ++i) log_.touch(i);
    log_.leave();
  }
  void commit() override {
    ++log_.ended_;
    completed_ = true;
    items_done_ = items_;
  }
  void abandon(std::size_t items_done) noexcept override {
    ++log_.ended_;
    completed_ = false;
    items_done_ = items_done;
  }
  void reset() {
    std::fill(values_.begin(), values_.end(), std::nanf(""));
    log_.reset();
    completed_ = false;
    items_done_ = 0;
  }
  // Items [from, to) written once each, with the values the compute gives.
  ::testing::AssertionResult has(std::size_t from, std::size_t to, std::size_t inputs) const {
    if (!log_.touched_once(from, to))
      return ::testing::AssertionFailure() << name() << " did not get items " << from << ".." << to << " once each";
    for (std::size_t i = from; i < to; ++i)
      if (!(values_[i] == output_value(output_, input_sum(inputs, i))))
        return ::testing::AssertionFailure() << name() << " got " << values_[i] << " for item " << i << ", expected "
                                             << output_value(output_, input_sum(inputs, i));
    return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult right(std::size_t inputs) const {
    if (auto calls = log_.right(name()); !calls) return calls;
    if (log_.ended_ != 1 || !completed_ || items_done_ != items_)
      return ::testing::AssertionFailure() << name() << " ended " << log_.ended_ << " times, completed " << completed_
                                           << " with " << items_done_ << " items, not committed once with " << items_;
    return has(0, items_, inputs);
  }

 private:
  std::size_t output_, items_;
  bool split_;
  std::vector<float> values_;
  CallLog log_;
  bool completed_ = false;
  std::size_t items_done_ = 0;
};

// Host memory of one span: pinned, pageable, or pageable registered by the caller.
struct MixedSpans::HostSpan {
  std::vector<float> pageable;
  std::optional<Pinned<float>> pinned;
  std::unique_ptr<Held> registration;
  float* data = nullptr;

  HostSpan(SpanKind kind, HostBackend& backend, std::size_t items) {
    if (kind == K::pinned) {
      pinned.emplace(backend.pinned<float>(items));
      data = pinned->data();
      return;
    }
    pageable.resize(items);
    data = pageable.data();
    if (kind == K::registered && items > 0) registration = backend.register_memory(data, items * sizeof(float));
  }
};

std::vector<Mix> span_mixes() {
  using P = HostMemoryPolicy;
  return {
      {"pinned_to_pinned", {K::pinned}, {K::pinned}, {}, P::stage},
      {"staged_to_staged", {K::pageable}, {K::pageable}, {}, P::stage},
      {"registered_by_caller", {K::registered}, {K::registered}, {}, P::stage},
      {"registered_by_policy", {K::pageable}, {K::pageable}, {}, P::register_memory},
      {"source_to_sink", {K::source}, {K::sink}, {}, P::stage},
      {"split_source_to_split_sink", {K::split_source}, {K::split_sink}, {}, P::stage},
      {"pinned_to_staged", {K::pinned}, {K::pageable}, {}, P::stage},
      {"staged_to_pinned", {K::pageable}, {K::pinned}, {}, P::stage},
      {"source_to_pinned", {K::source}, {K::pinned}, {}, P::stage},
      {"registered_to_sink", {K::registered}, {K::sink}, {}, P::stage},
      {"inout_pinned", {}, {}, {K::pinned}, P::stage},
      {"inout_staged", {}, {}, {K::pageable}, P::stage},
      {"everything_at_once",
       {K::pinned, K::pageable, K::source, K::registered, K::split_source},
       {K::pinned, K::pageable, K::sink, K::split_sink, K::registered},
       {K::pageable, K::pinned},
       P::stage},
  };
}

MixedSpans::MixedSpans(const Mix& mix, HostBackend& backend, std::size_t items)
    : mix_(mix), items_(items) {
  for (std::size_t j = 0; j < mix.inputs.size(); ++j) {
    const K kind = mix.inputs[j];
    sources_.push_back(is_source(kind) ? std::make_shared<GeneratedSource>(j, items, kind == K::split_source) : nullptr);
    inputs_.push_back(is_source(kind) ? nullptr : std::make_unique<HostSpan>(kind, backend, items));
    if (inputs_.back())
      for (std::size_t i = 0; i < items; ++i) inputs_.back()->data[i] = input_value(j, i);
  }
  for (std::size_t k = 0; k < mix.outputs.size(); ++k) {
    const K kind = mix.outputs[k];
    sinks_.push_back(is_sink(kind) ? std::make_shared<CollectingSink>(k, items, kind == K::split_sink) : nullptr);
    outputs_.push_back(is_sink(kind) ? nullptr : std::make_unique<HostSpan>(kind, backend, items));
  }
  for (const K kind : mix.inouts) inouts_.push_back(std::make_unique<HostSpan>(kind, backend, items));
  reset();
}

MixedSpans::~MixedSpans() = default;

void MixedSpans::add_to(Pipeline& p) {
  std::vector<SpanHandle<const float>> ins;
  std::vector<SpanHandle<float>> outs, inouts;
  for (std::size_t j = 0; j < inputs_.size(); ++j)
    ins.push_back(sources_[j] ? p.input(SourceOf<float>{sources_[j]})
                              : p.input(std::span<const float>(inputs_[j]->data, items_)));
  for (std::size_t k = 0; k < outputs_.size(); ++k)
    outs.push_back(sinks_[k] ? p.output(SinkOf<float>{sinks_[k]}) : p.output(std::span<float>(outputs_[k]->data, items_)));
  for (const auto& span : inouts_) inouts.push_back(p.inout(std::span<float>(span->data, items_)));
  p.compute([this, ins, outs, inouts](const Chunk& c) {
    {
      std::lock_guard lock(mutex_);
      computed_.push_back(c.items);
      most_at_once_ = std::max(most_at_once_, ++at_once_);
    }
    for (std::size_t i = 0; i < c.size(); ++i) {
      float sum = 0;
      for (std::size_t j = 0; j < ins.size(); ++j) sum += static_cast<float>(j + 1) * c[ins[j]][i];
      for (std::size_t k = 0; k < outs.size(); ++k) c[outs[k]][i] = output_value(k, sum);
      for (const auto& h : inouts) c[h][i] = inout_value(c[h][i], sum);
    }
    std::lock_guard lock(mutex_);
    --at_once_;
  });
}

void MixedSpans::reset() {
  for (const auto& span : outputs_)
    if (span) std::fill(span->data, span->data + items_, std::nanf(""));
  for (std::size_t m = 0; m < inouts_.size(); ++m)
    for (std::size_t i = 0; i < items_; ++i) inouts_[m]->data[i] = inout_first(m, i);
  for (const auto& source : sources_)
    if (source) source->reset();
  for (const auto& sink : sinks_)
    if (sink) sink->reset();
  std::lock_guard lock(mutex_);
  computed_.clear();
  most_at_once_ = 0;
}

::testing::AssertionResult MixedSpans::host_right(std::size_t from, std::size_t to) const {
  const std::size_t inputs = inputs_.size();
  for (std::size_t k = 0; k < outputs_.size(); ++k) {
    if (!outputs_[k]) continue;
    for (std::size_t i = from; i < to; ++i)
      if (!(outputs_[k]->data[i] == output_value(k, input_sum(inputs, i))))
        return ::testing::AssertionFailure() << "output " << k << ", item " << i << " of " << items_ << " is "
                                             << outputs_[k]->data[i] << ", expected "
                                             << output_value(k, input_sum(inputs, i));
  }
  for (std::size_t m = 0; m < inouts_.size(); ++m)
    for (std::size_t i = from; i < to; ++i) {
      const float expected = inout_value(inout_first(m, i), input_sum(inputs, i));
      if (!(inouts_[m]->data[i] == expected))
        return ::testing::AssertionFailure() << "inout " << m << ", item " << i << " of " << items_ << " is "
                                             << inouts_[m]->data[i] << ", expected " << expected;
    }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult MixedSpans::all_right() const {
  if (auto host = host_right(0, items_); !host) return host;
  for (const auto& source : sources_)
    if (source)
      if (auto r = source->right(); !r) return r;
  for (const auto& sink : sinks_)
    if (sink)
      if (auto r = sink->right(inputs_.size()); !r) return r;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult MixedSpans::chunk_right(ItemRange range) const {
  if (auto host = host_right(range.begin, range.end); !host) return host;
  for (const auto& sink : sinks_)
    if (sink)
      if (auto r = sink->has(range.begin, range.end, inputs_.size()); !r) return r;
  return ::testing::AssertionSuccess();
}

std::vector<ItemRange> MixedSpans::computed() const {
  std::lock_guard lock(mutex_);
  return computed_;
}

}  // namespace sluice::test
