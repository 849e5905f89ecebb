#include "sluice/multi_pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "sluice/error.hpp"
#include "sluice/multi_gpu_plans.hpp"
#include "sluice/staging_pool.hpp"

namespace sluice {

MultiPipeline::MultiPipeline(std::vector<int> devices, PipelineOptions options)
    : devices_(std::move(devices)), options_(options), generation_(detail::new_span_generation()) {
  if (devices_.empty()) throw std::invalid_argument("MultiPipeline: no device");
  int count = 0;
  SLUICE_CUDA_CHECK(cudaGetDeviceCount(&count));
  for (int d : devices_)
    if (d < 0 || d >= count)
      throw std::invalid_argument("MultiPipeline: device " + std::to_string(d) + " does not exist (" + std::to_string(count) +
                                  " present)");
  weights_.assign(devices_.size(), 1.0);
}

MultiPipeline::~MultiPipeline() = default;
MultiPipeline::MultiPipeline(MultiPipeline&&) noexcept = default;
MultiPipeline& MultiPipeline::operator=(MultiPipeline&&) noexcept = default;

std::size_t MultiPipeline::add(const void* data, std::size_t items, std::size_t item_bytes, SpanRole role) {
  if (!parts_.empty()) throw std::logic_error("MultiPipeline: spans are added before the first run");
  spans_.push_back({static_cast<std::byte*>(const_cast<void*>(data)), items, item_bytes, role});
  return spans_.size() - 1;
}

MultiPipeline& MultiPipeline::compute(std::function<void(const Chunk&, std::size_t)> fn) {
  fn_ = std::make_shared<std::function<void(const Chunk&, std::size_t)>>(std::move(fn));
  return *this;
}

void MultiPipeline::set_weights(std::vector<double> weights) {
  if (weights.size() != devices_.size()) throw std::invalid_argument("MultiPipeline: one weight per device");
  weights_ = std::move(weights);
}

MultiReport MultiPipeline::run() {
  if (spans_.empty()) throw std::invalid_argument("MultiPipeline has no spans");
  if (!fn_) throw std::invalid_argument("MultiPipeline has no compute callable");
  const std::size_t items = spans_.front().items;
  for (std::size_t k = 0; k < spans_.size(); ++k)
    if (spans_[k].items != items)
      throw std::invalid_argument("span " + std::to_string(k) + " has " + std::to_string(spans_[k].items) +
                                  " items but span 0 has " + std::to_string(items) + ": all spans must match");
  auto shares = deal_items(items, weights_, 4096);
  // Shares within 2 % of the last run's stay as they were: rebinding a span
  // undoes its registration (HostMemoryPolicy::automatic), and run-to-run
  // noise should not cost that.
  bool same = shares_.size() == shares.size() && shares_.back().items.end == items;
  for (std::size_t p = 0; same && p < shares.size(); ++p) {
    const auto moved = static_cast<double>(shares[p].items.begin) - static_cast<double>(shares_[p].items.begin);
    same = std::abs(moved) <= 0.02 * static_cast<double>(items);
  }
  if (same) shares = shares_;
  if (parts_.empty())
    for (std::size_t p = 0; p < devices_.size(); ++p) {
      PipelineOptions o = options_;
      o.device = devices_[p];
      // The parts share the host's cores: each stages with its share of them
      // (a pool of every core per part would oversubscribe them).
      if (o.staging_threads == 0)
        o.staging_threads = std::max(1u, StagingPool::default_thread_count() / static_cast<unsigned>(devices_.size()));
      auto pipeline = std::make_unique<Pipeline>(o);
      auto offset = std::make_shared<std::size_t>(0);
      for (const auto& s : spans_) pipeline->add_host(s.data, 0, s.item_bytes, s.role);
      // The caller's handles belong to this MultiPipeline: the chunk is shown
      // to it under this pipeline's identity, with global item numbers.
      pipeline->compute([fn = fn_, offset, generation = generation_, p](const Chunk& c) {
        Chunk global = c;
        global.items = {c.items.begin + *offset, c.items.end + *offset};
        global.generation = generation;
        (*fn)(global, p);
      });
      parts_.push_back(std::move(pipeline));
      offsets_.push_back(offset);
    }
  if (!same) {
    for (std::size_t p = 0; p < parts_.size(); ++p) {
      *offsets_[p] = shares[p].items.begin;
      for (std::size_t k = 0; k < spans_.size(); ++k)
        parts_[p]->rebind_host(k, spans_[k].data + shares[p].items.begin * spans_[k].item_bytes,
                               shares[p].items.size());
    }
    shares_ = shares;
  }
  MultiReport report;
  report.item_count = items;
  const auto begin = std::chrono::steady_clock::now();
  std::vector<Submission> running;
  std::vector<std::size_t> which;
  for (std::size_t p = 0; p < parts_.size(); ++p) {
    report.parts.push_back({devices_[p], shares[p].items, {}});
    if (shares[p].items.size() == 0) continue;
    running.push_back(parts_[p]->submit());
    which.push_back(p);
  }
  std::exception_ptr first_error;
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
