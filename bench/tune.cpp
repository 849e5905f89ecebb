#include "tune.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absolute_bound.hpp"
#include "bench.hpp"
#include "sluice/byte_size.hpp"
#include "sluice/device.hpp"
#include "sluice/fixed_costs.hpp"
#include "sluice/host_rates.hpp"
#include "sluice/link_rates.hpp"
#include "sluice/tuner.hpp"
#include "text_table.hpp"

namespace sluice::bench {

namespace {
std::string describe(const PipelineOptions& o, std::size_t item_bytes) {
  std::string text = format_bytes(o.chunk_items * item_bytes) + " chunks";
  if (o.first_chunk_items > 0) text += ", ramp from " + format_bytes(o.first_chunk_items * item_bytes);
  return text + ", depth " + std::to_string(o.depth);
}
constexpr std::size_t finalist_count = 3;

// The defaults and the sweep's fastest few again, each once per round.
std::vector<TunePoint> final_rounds(workloads::Problem& problem, const std::vector<TunePoint>& sweep, int repeats) {
  std::vector<TunePoint> points{{PipelineOptions{}, "defaults", {}}};
  for (std::size_t k = 0; k < std::min(finalist_count, sweep.size()); ++k) points.push_back(sweep[k]);
  std::vector<Pipeline> pipelines;
  std::vector<workloads::Contender> contenders;
  for (auto& point : points) {
    PipelineOptions options = workloads::elementwise(point.options);
    options.host_memory = HostMemoryPolicy::stage;
    pipelines.push_back(workloads::make_pipeline(problem, options));
  }
  for (std::size_t k = 0; k < points.size(); ++k)
    contenders.push_back({points[k].label, &problem, true, [&pipelines, k] { pipelines[k].run(); }, {}, {}});
  const auto rows = workloads::measure_in_rounds(contenders, std::max(5, 2 * repeats));
  for (std::size_t k = 0; k < points.size(); ++k) points[k].row = rows[k];
  return points;
}

}  // namespace

std::vector<TuneCase> run_tune(const TuneOptions& o, const std::function<void(const std::string&)>& progress) {
  Device device(o.device);
  device.make_current();
  const FixedCosts fixed = measure_fixed_costs(o.device);
  StagingPool pool;
  std::vector<TuneCase> cases;
  for (std::size_t bytes : o.sizes)
    for (const auto& w : o.workloads) {
      const std::size_t items = bytes / sizeof(float);
      workloads::Problem problem(w, items, o.pageable ? workloads::Problem::Memory::pageable : workloads::Problem::Memory::pinned);
      const auto bound = workloads::absolute_bound(problem, o.device, o.repeats, o.pageable ? &pool : nullptr);
      const Bound& b = o.pageable ? bound.staged : bound.pinned;
      TuneCase c;
      c.workload = w.name();
      c.bytes = bytes;
      c.bound_ms = b.ms;
      c.bound_term = b.limiter;
      auto measure = [&](const PipelineOptions& options, const std::string& label) {
        PipelineOptions run_options = workloads::elementwise(options);
        run_options.host_memory = HostMemoryPolicy::stage;  // the sweep is about chunks, not registration
        Pipeline p = workloads::make_pipeline(problem, run_options);
        auto row = workloads::measure_row(label, problem, true, o.repeats, [&] { p.run(); });
        if (progress)
          progress(fmt::format("{} {} {}: {:.3f} ms{}", c.workload, format_bytes(bytes), label, row.ms.median,
                               row.verified ? "" : " NOT VERIFIED: " + row.detail));
        return row;
      };
      for (const auto& options : sweep_settings(items, sizeof(float))) {
        const std::string label = describe(options, sizeof(float));
        c.sweep.push_back({options, label, measure(options, label)});
      }
      auto fastest_first = [](const TunePoint& x, const TunePoint& y) { return x.row.ms.median < y.row.ms.median; };
      std::sort(c.sweep.begin(), c.sweep.end(), fastest_first);
      c.finalists = final_rounds(problem, c.sweep, o.repeats);
      for (auto& f : c.finalists) {
        if (f.label == "defaults") c.defaults = f.row;
        if (progress)
          progress(fmt::format("{} {} final rounds, {}: {:.3f} ms", c.workload, format_bytes(bytes), f.label, f.row.ms.median));
      }
      std::erase_if(c.finalists, [](const TunePoint& f) { return f.label == "defaults"; });
      std::sort(c.finalists.begin(), c.finalists.end(), fastest_first);
      ModelInput base;
      // Staged runs at the staging rate they see beside their own copies, as in the bench.
      base.rates = o.pageable ? staging_beside_copies(bound.staged_volume, bound.rates) : bound.rates;
      base.fixed = fixed;
      base.kernel.ms_per_item = bound.kernel_ms / static_cast<double>(items);
      base.spans = array_spans(static_cast<unsigned>(w.input_count()), 1, sizeof(float), o.pageable);
      base.items = items;
      for (auto& point : c.sweep) point.model_ms = predict(with_setting(base, point.options)).ms;
      const ModelChoice pick = choose_with_model(base);
      c.model_label = describe(pick.options, sizeof(float));
      for (const auto& point : c.sweep)
        if (point.label == c.model_label) c.model_pick_ms = point.row.ms.median;
      cases.push_back(std::move(c));
    }
  return cases;
}

ModelErrors model_errors(const TuneCase& c) {
  ModelErrors e;
  std::vector<double> errors;
  for (const auto& p : c.sweep) {
    if (p.model_ms <= 0 || p.row.ms.median <= 0) continue;
    const double error = p.model_ms / p.row.ms.median - 1;
    errors.push_back(error);
    if (std::fabs(error) <= 0.10) ++e.within_10_percent;
    if (std::fabs(error) > std::fabs(e.worst)) e.worst = error;
  }
  e.count = errors.size();
  if (errors.empty()) return e;
  std::vector<double> magnitudes;
  for (double error : errors) magnitudes.push_back(std::fabs(error));
  std::nth_element(magnitudes.begin(), magnitudes.begin() + magnitudes.size() / 2, magnitudes.end());
  e.median_abs = magnitudes[magnitudes.size() / 2];
  return e;
}

std::string tune_text(const std::vector<TuneCase>& cases) {
  std::string out;
  tools::TextTable summary({"workload", "size", "defaults ms", "best ms", "best setting", "gap", "model's pick",
                            "its ms", "bound ms", "set by", "all verified"});
  for (const auto& c : cases) {
    bool verified = c.defaults.verified;
    for (const auto& p : c.sweep) verified &= p.row.verified;
    for (const auto& p : c.finalists) verified &= p.row.verified;
    const auto& best = c.finalists.empty() ? c.sweep.front() : c.finalists.front();
    summary.add_row({c.workload, format_bytes(c.bytes), fmt::format("{:.3f}", c.defaults.ms.median),
                     fmt::format("{:.3f}", best.row.ms.median), best.label,
                     fmt::format("{:+.1f}%", 100.0 * (c.defaults.ms.median / best.row.ms.median - 1)), c.model_label,
                     fmt::format("{:.3f}", c.model_pick_ms), fmt::format("{:.3f}", c.bound_ms), c.bound_term,
                     verified ? "yes" : "NO"});
  }
  out += summary.render();
  out += "\ngap = defaults over the fastest setting, minus one (target: within +3%), both from the final\n"
         "rounds: the defaults and the sweep's three fastest measured again, each once per round.\n";
  tools::TextTable model({"workload", "size", "settings", "model within 10%", "median |error|", "worst error"});
  for (const auto& c : cases) {
    const ModelErrors e = model_errors(c);
    model.add_row({c.workload, format_bytes(c.bytes), std::to_string(e.count),
                   fmt::format("{} of {}", e.within_10_percent, e.count), fmt::format("{:.1f}%", 100 * e.median_abs),
                   fmt::format("{:+.1f}%", 100 * e.worst)});
  }
  out += "\nThe model over the sweep (target: within 10% of measured):\n" + model.render();
  for (const auto& c : cases) {
    out += fmt::format("\n{} {}: the sweep, fastest first\n", c.workload, format_bytes(c.bytes));
    tools::TextTable table({"setting", "ms", "vs best", "model ms", "error", "verified"});
    for (const auto& p : c.sweep)
      table.add_row({p.label, fmt::format("{:.3f}", p.row.ms.median),
                     fmt::format("{:.3f}", p.row.ms.median / c.sweep.front().row.ms.median),
                     fmt::format("{:.3f}", p.model_ms), fmt::format("{:+.0f}%", 100 * (p.model_ms / p.row.ms.median - 1)),
                     p.row.verified ? "yes" : "NO"});
    out += table.render();
  }
  return out;
}

}  // namespace sluice::bench
