#include "tune.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absolute_bound.hpp"
#include "bench.hpp"
#include "bound/host_rates.hpp"
#include "bound/link_rates.hpp"
#include "measure.hpp"
#include "measure/fixed_costs.hpp"
#include "noise.hpp"
#include "sluice/core/byte_size.hpp"
#include "sluice/core/device.hpp"
#include "sluice/measure/tuner.hpp"

namespace sluice::bench {

using workloads::RowKind;

namespace {
constexpr const char* defaults_label = "defaults";
constexpr const char* defaults_again_label = "defaults, again (a second pipeline)";

// Every setting as the bench runs its workloads: kernels declared
// independent. Pinned spans go straight to the copy engines whatever the
// policy; pageable ones are staged, since the sweep is about chunks, not
// registration.
PipelineOptions run_options(const PipelineOptions& setting) {
  PipelineOptions options = workloads::elementwise(setting);
  options.host_memory = HostMemoryPolicy::stage;
  return options;
}

std::string describe(const PipelineOptions& o, std::size_t item_bytes) {
  std::string text = format_bytes(o.chunk_items * item_bytes) + " chunks";
  if (o.first_chunk_items > 0) text += ", ramp from " + format_bytes(o.first_chunk_items * item_bytes);
  text += ", depth " + std::to_string(o.depth);
  if (o.compute_streams > 0) text += ", " + std::to_string(o.compute_streams) + " compute streams";
  return text;
}
constexpr std::size_t finalist_count = 3;

RowKind kind_of(const TuneOptions& o) { return o.replayed ? RowKind::sluice_replayed : RowKind::sluice; }

Pipeline make_setting(workloads::Problem& problem, const PipelineOptions& setting, const TuneOptions& o) {
  Pipeline p = std::move(
      workloads::make_workload_pipeline(problem, run_options(setting), o.replayed ? Replay::graph : Replay::none).pipeline);
  // A replayed pipeline's captures, untimed: the first run's, and where it
  // learnt its chunks (adapt_chunks), the second's.
  if (o.replayed)
    for (int capture = 0; capture < 2; ++capture) p.run();
  return p;
}

// The defaults (twice: two pipelines of one setting, to show the noise) and
// the sweep's fastest few again, each once per round, through the same
// function and the same rounds as the bench's pinned rows.
std::vector<TunePoint> final_rounds(workloads::Problem& problem, const std::vector<TunePoint>& sweep, const TuneOptions& o) {
  std::vector<TunePoint> points{{PipelineOptions{}, defaults_label, {}}, {PipelineOptions{}, defaults_again_label, {}}};
  for (std::size_t k = 0; k < std::min(finalist_count, sweep.size()); ++k) points.push_back(sweep[k]);
  std::vector<Pipeline> pipelines;
  std::vector<workloads::Contender> contenders;
  for (auto& point : points) pipelines.push_back(make_setting(problem, point.options, o));
  for (std::size_t k = 0; k < points.size(); ++k)
    contenders.push_back({points[k].label, &problem, kind_of(o), [&pipelines, k] { pipelines[k].run(); }});
  const auto rows = workloads::measure_in_rounds(contenders, rounds_for(problem.items() * sizeof(float), o.final_repeats));
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
      c.replayed = o.replayed;
      auto measure = [&](const PipelineOptions& options, const std::string& label) {
        Pipeline p = make_setting(problem, options, o);
        auto row = workloads::measure_in_rounds({{label, &problem, kind_of(o), [&] { p.run(); }}}, o.repeats).front();
        if (progress)
          progress(fmt::format("{} {} {}: {:.3f} ms{}", c.workload, format_bytes(bytes), label, row.ms.median,
                               row.verified ? "" : " NOT VERIFIED: " + row.detail));
        return row;
      };
      for (const auto& options : sweep_settings(items, sizeof(float), KernelOrder::independent)) {
        const std::string label = describe(options, sizeof(float));
        c.sweep.push_back({options, label, measure(options, label)});
      }
      auto fastest_first = [](const TunePoint& x, const TunePoint& y) { return x.row.ms.median < y.row.ms.median; };
      std::sort(c.sweep.begin(), c.sweep.end(), fastest_first);
      c.finalists = final_rounds(problem, c.sweep, o);
      for (auto& f : c.finalists) {
        if (f.label == defaults_label) c.defaults = f.row;
        if (f.label == defaults_again_label) c.defaults_again = f.row;
        if (progress)
          progress(fmt::format("{} {} final rounds, {}: {:.3f} ms", c.workload, format_bytes(bytes), f.label, f.row.ms.median));
      }
      std::erase_if(c.finalists,
                    [](const TunePoint& f) { return f.label == defaults_label || f.label == defaults_again_label; });
      std::sort(c.finalists.begin(), c.finalists.end(), fastest_first);
      if (o.replayed) {  // the model plays run(): no prediction for a replay
        cases.push_back(std::move(c));
        continue;
      }
      ModelInput base;
      base.options = run_options({});
      // Staged runs at the staging rate they see beside their own copies, as in the bench.
      base.rates = o.pageable ? staging_beside_copies(bound.staged_volume, bound.rates) : bound.rates;
      base.fixed = fixed;
      base.kernel.ms_per_item = bound.kernel_ms / static_cast<double>(items);
      base.spans = array_spans(static_cast<unsigned>(w.input_count()), 1, sizeof(float), o.pageable);
      base.items = items;
      c.model_input = base;
      for (auto& point : c.sweep) point.model_ms = predict(with_setting(base, point.options)).ms;
      const ModelChoice pick = choose_with_model(base);
      c.model_label = describe(pick.options, sizeof(float));
      for (const auto& point : c.sweep)
        if (point.label == c.model_label) c.model_pick_ms = point.row.ms.median;
      cases.push_back(std::move(c));
    }
  return cases;
}

}  // namespace sluice::bench
