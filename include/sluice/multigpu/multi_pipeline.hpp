#pragma once
// One call streams host arrays through several GPUs: each gets a contiguous
// share of the items and a Pipeline of its own (its own ring and streams),
// and the shares follow the GPUs' speed: equal at first, then in proportion
// to the items per millisecond each reached in the previous run.
//
//   sluice::MultiPipeline p({0, 1});
//   auto x = p.input(a);
//   auto y = p.output(b);
//   p.compute([=](const sluice::Chunk& c, std::size_t part) { scale<<<..., c.stream>>>(c[x].data(), c[y].data(), c.size()); });
//   sluice::MultiReport report = p.run();   // report.parts[k]: device, items, RunReport
//
// A device may be named twice (two pipelines sharing one GPU). Chunks carry
// global item ranges. The same rules as Pipeline hold for spans and errors:
// spans are checked (matching lengths, no output overlapping another span)
// before any part runs. Parts may run on host executors instead
// (host_executor.hpp), to test multi-part code where there is no GPU.
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "sluice/multigpu/multi_gpu_plans.hpp"
#include "sluice/pipeline/host_executor.hpp"
#include "sluice/pipeline/pipeline.hpp"

namespace sluice {

namespace detail {
struct MultiPipelineAccess;  // language bindings, whose item types are known only at run time
}

struct MultiReport {
  struct Part {
    int device = 0;
    ItemRange items;
    RunReport report;  // empty when the part had no items
  };
  std::vector<Part> parts;
  double wall_ms = 0;  // the whole run, every part finished
  std::size_t item_count = 0;
};

class MultiPipeline {
 public:
  // Throws std::invalid_argument for no device or one that does not exist.
  explicit MultiPipeline(std::vector<int> devices, PipelineOptions options = {});
  // One part per host executor (a part's device reads -1 in the report).
  static MultiPipeline on_host(std::vector<HostExecutor> parts, PipelineOptions options = {});
  ~MultiPipeline();
  MultiPipeline(MultiPipeline&&) noexcept;
  MultiPipeline& operator=(MultiPipeline&&) noexcept;

  template <HostRange R>
  SpanHandle<const item_of<R>> input(R&& range) {
    return {add(std::ranges::data(range), std::ranges::size(range), sizeof(item_of<R>), SpanRole::input), generation_};
  }
  template <WritableHostRange R>
  SpanHandle<item_of<R>> output(R&& range) {
    return {add(std::ranges::data(range), std::ranges::size(range), sizeof(item_of<R>), SpanRole::output), generation_};
  }
  template <WritableHostRange R>
  SpanHandle<item_of<R>> inout(R&& range) {
    return {add(std::ranges::data(range), std::ranges::size(range), sizeof(item_of<R>), SpanRole::inout), generation_};
  }

  // fn(chunk, part): launch on chunk.stream; part is the index into the
  // devices. The parts run at once, so fn is called from several threads.
  // A callable set after a run replaces the old one in every part.
  MultiPipeline& compute(std::function<void(const Chunk&, std::size_t part)> fn);
  // The parts' shares for the next run (default: from the last run's speed).
  void set_weights(std::vector<double> weights);
  MultiReport run();

 private:
  struct OnHost {};
  MultiPipeline(OnHost, std::vector<HostExecutor> parts, PipelineOptions options);
  friend struct detail::MultiPipelineAccess;
  struct Span {
    std::byte* data;
    std::size_t items, item_bytes;
    SpanRole role;
  };
  using ComputeOfPart = std::function<void(const Chunk&, std::size_t)>;
  std::size_t add(const void* data, std::size_t items, std::size_t item_bytes, SpanRole role);
  void validate() const;
  std::size_t part_count() const { return devices_.size(); }
  std::vector<int> devices_;  // -1 for a part on a host executor
  PipelineOptions options_;
  // Part p's compute callable: the caller's, through fn_, with global item numbers.
  ComputeFn part_compute(std::size_t p) const;
  // Makes part p's pipeline with these options (on its GPU or its host executor).
  std::function<std::unique_ptr<Pipeline>(std::size_t part, const PipelineOptions&)> make_part_;
  std::vector<Span> spans_;
  // The parts' compute wrappers call through this one holder, so a callable
  // set after the parts exist reaches them all.
  std::shared_ptr<ComputeOfPart> fn_ = std::make_shared<ComputeOfPart>();
  std::vector<double> weights_;
  std::vector<ItemShare> shares_;  // what the parts hold now
  std::uint64_t generation_;
  std::vector<std::unique_ptr<Pipeline>> parts_;
  std::vector<std::shared_ptr<std::size_t>> offsets_;  // each part's first item, read by its compute wrapper
};

}  // namespace sluice
