#include "sluice/multigpu/multi_pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/staging_pool.hpp"
#include "pipeline/pipeline_access.hpp"
#include "pipeline/spans/span_set.hpp"
#include "sluice/multigpu/multi_gpu_plans.hpp"

namespace sluice {

using detail::PipelineAccess;

MultiPipeline MultiPipeline::on_host(std::vector<HostExecutor> parts, PipelineOptions options) {
  return MultiPipeline(OnHost{}, std::move(parts), options);
}

MultiPipeline::MultiPipeline(OnHost, std::vector<HostExecutor> parts, PipelineOptions options)
    : options_(options), generation_(detail::new_span_generation()) {
  if (parts.empty()) throw std::invalid_argument("MultiPipeline: no part");
  devices_.assign(parts.size(), -1);
  weights_.assign(parts.size(), 1.0);
  make_part_ = [parts = std::move(parts)](std::size_t p, const PipelineOptions& o) {
    return std::make_unique<Pipeline>(o, parts[p]);
  };
}

MultiPipeline::~MultiPipeline() = default;
MultiPipeline::MultiPipeline(MultiPipeline&&) noexcept = default;
MultiPipeline& MultiPipeline::operator=(MultiPipeline&&) noexcept = default;

std::size_t MultiPipeline::add(const void* data, std::size_t items, std::size_t item_bytes, SpanRole role) {
  if (!parts_.empty()) throw std::logic_error("MultiPipeline: spans are added before the first run");
  if (item_bytes == 0) throw std::invalid_argument("span items must be at least 1 byte");
  spans_.push_back({static_cast<std::byte*>(const_cast<void*>(data)), items, item_bytes, role});
  return spans_.size() - 1;
}

MultiPipeline& MultiPipeline::compute(std::function<void(const Chunk&, std::size_t)> fn) {
  *fn_ = std::move(fn);
  // Each part is told of the new callable too: new work, whose chunks it learns again (adapt_chunks).
  for (std::size_t p = 0; p < parts_.size(); ++p) parts_[p]->compute(part_compute(p));
  return *this;
}

// The caller's handles belong to this MultiPipeline: the chunk is shown to
// it under this pipeline's identity, with global item numbers.
ComputeFn MultiPipeline::part_compute(std::size_t p) const {
  return [fn = fn_, offset = offsets_[p], generation = generation_, p](const Chunk& c) {
    Chunk global = c;
    global.items = {c.items.begin + *offset, c.items.end + *offset};
    global.generation_ = generation;
    (*fn)(global, p);
  };
}

void MultiPipeline::set_weights(std::vector<double> weights) {
  if (weights.size() != part_count()) throw std::invalid_argument("MultiPipeline: one weight per part");
  weights_ = std::move(weights);
}

// The whole spans, before they are cut into shares: the same checks as one
// Pipeline makes (a part sees only its share, and cannot see that its
// output overlaps another part's input).
void MultiPipeline::validate() const {
  detail::SpanSet whole;
  for (const Span& s : spans_) {
    detail::SpanRecord record;
    record.role = s.role;
    record.item_bytes = s.item_bytes;
    record.items = s.items;
    record.host = s.data;
    whole.add(std::move(record));
  }
  whole.validate();
  if (!*fn_) throw std::invalid_argument("MultiPipeline has no compute callable");
}

MultiReport MultiPipeline::run() {
  validate();
  const std::size_t items = spans_.front().items;
  auto shares = deal_items(items, weights_, 4096);
  // Shares whose boundaries move by no more than 2 % of the items stay as
  // they were: run-to-run noise in the parts' speeds should not move work
  // from one GPU to another and back.
  bool same = shares_.size() == shares.size() && shares_.back().items.end == items;
  for (std::size_t p = 0; same && p < shares.size(); ++p) {
    const auto moved = static_cast<double>(shares[p].items.begin) - static_cast<double>(shares_[p].items.begin);
    same = std::abs(moved) <= 0.02 * static_cast<double>(items);
  }
  if (same) shares = shares_;
  if (parts_.empty())
    for (std::size_t p = 0; p < part_count(); ++p) {
      PipelineOptions o = options_;
      // The parts share the host's cores: each stages with its share of them
      // (a pool of every core per part would oversubscribe them).
      if (o.staging_threads == 0)
        o.staging_threads = std::max(1u, StagingPool::default_thread_count() / static_cast<unsigned>(part_count()));
      std::unique_ptr<Pipeline> pipeline = make_part_(p, o);
      for (const auto& s : spans_) PipelineAccess::add_host(*pipeline, s.data, 0, s.item_bytes, s.role);
      offsets_.push_back(std::make_shared<std::size_t>(0));
      pipeline->compute(part_compute(p));
      parts_.push_back(std::move(pipeline));
    }
  if (!same) {
    for (std::size_t p = 0; p < parts_.size(); ++p) {
      *offsets_[p] = shares[p].items.begin;
      for (std::size_t k = 0; k < spans_.size(); ++k)
        PipelineAccess::rebind_host(*parts_[p], k, PipelineAccess::generation(*parts_[p]),
                                    spans_[k].data + shares[p].items.begin * spans_[k].item_bytes,
                                    shares[p].items.size(), spans_[k].role != SpanRole::input);
    }
    shares_ = shares;
  }
  MultiReport report;
  report.item_count = items;
  const auto begin = std::chrono::steady_clock::now();
  std::vector<Submission> running;
  std::vector<std::size_t> which;
  std::exception_ptr first_error;
  for (std::size_t p = 0; p < parts_.size(); ++p) {
    report.parts.push_back({devices_[p], shares[p].items, {}});
    if (shares[p].items.size() == 0) continue;
    try {
      running.push_back(parts_[p]->submit());
      which.push_back(p);
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
      break;  // the parts already running finish below
    }
  }
  for (std::size_t i = 0; i < running.size(); ++i) {
    try {
      report.parts[which[i]].report = running[i].wait();
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
  report.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  // The next run deals by this run's speed: items per millisecond of each part.
  for (std::size_t p = 0; p < parts_.size(); ++p) {
    const auto& part = report.parts[p];
    if (part.items.size() > 0 && part.report.wall_ms > 0)
      weights_[p] = static_cast<double>(part.items.size()) / part.report.wall_ms;
  }
  return report;
}

}  // namespace sluice
