#include "sluice/multigpu/multi_gpu_plans.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace sluice {

std::vector<std::vector<StageStep>> pipeline_schedule(PipelineScheduleKind kind, std::size_t stages, std::size_t micros) {
  if (stages == 0 || micros == 0) throw std::invalid_argument("a pipeline schedule needs at least one stage and one micro-batch");
  std::vector<std::vector<StageStep>> steps(stages);
  for (std::size_t s = 0; s < stages; ++s) {
    auto& order = steps[s];
    if (kind == PipelineScheduleKind::gpipe) {
      for (std::size_t m = 0; m < micros; ++m) order.push_back({true, m});
      for (std::size_t m = micros; m-- > 0;) order.push_back({false, m});
      continue;
    }
    // 1F1B: warm up with enough forwards to fill the pipeline below this
    // stage, then alternate, then drain the backwards.
    const std::size_t warmup = std::min(micros, stages - s);
    std::size_t next_forward = 0, next_backward = 0;
    for (; next_forward < warmup; ++next_forward) order.push_back({true, next_forward});
    while (next_backward < micros) {
      order.push_back({false, next_backward++});
      if (next_forward < micros) order.push_back({true, next_forward++});
    }
  }
  return steps;
}

std::vector<ScheduledStep> issue_order(const std::vector<std::vector<StageStep>>& steps) {
  const std::size_t stages = steps.size();
  std::size_t micros = 0;
  for (const auto& order : steps)
    for (const auto& step : order) micros = std::max(micros, step.micro + 1);
  std::vector<std::vector<char>> fwd(stages, std::vector<char>(micros, 0)), bwd = fwd;
  std::vector<std::size_t> next(stages, 0);
  std::vector<ScheduledStep> order;
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t s = 0; s < stages; ++s) {
      // Each stage goes as far as its inputs allow before the next stage's turn.
      while (next[s] < steps[s].size()) {
        const StageStep step = steps[s][next[s]];
        const bool ready = step.forward ? (s == 0 || fwd[s - 1][step.micro])
                                        : (fwd[s][step.micro] && (s + 1 == stages || bwd[s + 1][step.micro]));
        if (!ready) break;
        (step.forward ? fwd : bwd)[s][step.micro] = 1;
        order.push_back({s, step});
        ++next[s];
        progress = true;
      }
    }
  }
  for (std::size_t s = 0; s < stages; ++s)
    if (next[s] < steps[s].size()) throw std::logic_error("schedule can never finish: a step waits on one that runs after it");
  return order;
}

ScheduleTiming time_schedule(const std::vector<std::vector<StageStep>>& steps, double forward, double backward, double hop) {
  const std::size_t stages = steps.size();
  if (stages == 0) return {};
  std::size_t micros = 0;
  for (const auto& order : steps)
    for (const auto& step : order) micros = std::max(micros, step.micro + 1);
  // Finish times of each (stage, micro) forward and backward; negative: not yet run.
  std::vector<std::vector<double>> fwd(stages, std::vector<double>(micros, -1)), bwd = fwd;
  std::vector<std::size_t> next(stages, 0);
  std::vector<double> free_at(stages, 0);
  double busy = 0, end = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t s = 0; s < stages; ++s) {
      if (next[s] >= steps[s].size()) continue;
      const StageStep step = steps[s][next[s]];
      double ready = free_at[s];
      if (step.forward) {
        if (s > 0) {
          if (fwd[s - 1][step.micro] < 0) continue;
          ready = std::max(ready, fwd[s - 1][step.micro] + hop);
        }
      } else {
        if (fwd[s][step.micro] < 0) continue;
        if (s + 1 < stages) {
          if (bwd[s + 1][step.micro] < 0) continue;
          ready = std::max(ready, bwd[s + 1][step.micro] + hop);
        }
      }
      const double cost = step.forward ? forward : backward;
      (step.forward ? fwd : bwd)[s][step.micro] = free_at[s] = ready + cost;
      busy += cost;
      end = std::max(end, free_at[s]);
      ++next[s];
      progress = true;
    }
  }
  for (std::size_t s = 0; s < stages; ++s)
    if (next[s] < steps[s].size()) throw std::logic_error("schedule can never finish: a step waits on one that runs after it");
  ScheduleTiming t;
  t.makespan = end;
  t.bubble_fraction = end > 0 ? 1.0 - busy / (static_cast<double>(stages) * end) : 0.0;
  return t;
}

std::vector<Bucket> plan_buckets(const std::vector<std::size_t>& gradient_bytes, std::size_t bucket_bytes) {
  std::vector<Bucket> buckets;
  for (std::size_t i = 0; i < gradient_bytes.size(); ++i) {
    if (buckets.empty() || buckets.back().bytes >= bucket_bytes ||
        (buckets.back().bytes + gradient_bytes[i] > bucket_bytes && buckets.back().count > 0))
      buckets.push_back({i, 0, 0});
    buckets.back().count += 1;
    buckets.back().bytes += gradient_bytes[i];
  }
  return buckets;
}

std::vector<ItemShare> deal_items(std::size_t items, const std::vector<double>& weights, std::size_t granule) {
  if (weights.empty()) throw std::invalid_argument("deal_items: no weights");
  double total = 0;
  for (double w : weights) {
    if (w < 0 || !std::isfinite(w)) throw std::invalid_argument("deal_items: weights must be finite and not negative");
    total += w;
  }
  if (total <= 0) throw std::invalid_argument("deal_items: no weight is positive");
  granule = std::max<std::size_t>(1, granule);
  std::vector<ItemShare> shares;
  std::size_t begin = 0;
  double cumulative = 0;
  std::size_t last_positive = 0;
  for (std::size_t k = 0; k < weights.size(); ++k)
    if (weights[k] > 0) last_positive = k;
  for (std::size_t k = 0; k < weights.size(); ++k) {
    cumulative += weights[k];
    std::size_t end = k == last_positive ? items
                                         : static_cast<std::size_t>(std::llround(static_cast<double>(items) * cumulative / total)) /
                                               granule * granule;
    if (k > last_positive) end = items;
    end = std::clamp(end, begin, items);
    shares.push_back({k, {begin, end}});
    begin = end;
  }
  return shares;
}

}  // namespace sluice
