// `sluice tune`'s report: the summary of every case, the model over the
// sweep, each case's sweep, and the targets; or the same as JSON.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "noise.hpp"
#include "sluice/core/byte_size.hpp"
#include "targets.hpp"
#include "text_table.hpp"
#include "tune_result.hpp"

namespace sluice::bench {

namespace {

// A row's spread; 0 for a row without its runs.
double relative_spread(const workloads::MeasuredRow& row) {
  return row.samples.empty() ? 0 : spread_of(row.samples).relative;
}

std::string ms_with_spread(const workloads::MeasuredRow& row) {
  if (!row.measured()) return "n/a";
  return fmt::format("{:.3f} ({:.1f}%)", row.ms.median, 100 * relative_spread(row));
}

nlohmann::json row_json(const workloads::MeasuredRow& row) {
  if (!row.measured()) return nullptr;
  const Spread s = spread_of(row.samples.empty() ? std::vector<double>{row.ms.median} : row.samples);
  return {{"median_ms", row.ms.median}, {"q25_ms", s.q25},     {"q75_ms", s.q75},
          {"min_ms", row.ms.min},       {"max_ms", row.ms.max}, {"spread", s.relative},
          {"samples_ms", row.samples},  {"verified", row.verified}};
}

}  // namespace

bool TuneCase::all_verified() const {
  bool ok = defaults.verified && defaults_again.verified;
  for (const auto& p : sweep) ok = ok && p.row.verified;
  for (const auto& p : finalists) ok = ok && p.row.verified;
  return ok;
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
  tools::TextTable summary({"workload", "size", "defaults ms (IQR)", "again ms (IQR)", "best ms (IQR)", "best setting",
                            "gap", "model's pick", "its ms", "bound ms", "set by", "all verified"});
  for (const auto& c : cases) {
    const TunePoint& best = c.best();
    summary.add_row({c.workload, format_bytes(c.bytes), ms_with_spread(c.defaults), ms_with_spread(c.defaults_again),
                     ms_with_spread(best.row), best.label,
                     fmt::format("{:+.1f}%", 100.0 * (c.defaults.ms.median / best.row.ms.median - 1)),
                     c.replayed ? "not modelled (replayed)" : c.model_label,
                     c.replayed ? "-" : fmt::format("{:.3f}", c.model_pick_ms), fmt::format("{:.3f}", c.bound_ms), c.bound_term,
                     c.all_verified() ? "yes" : "NO"});
  }
  out += summary.render();
  out += "\ngap = defaults over the fastest setting, minus one (target: within +3%), both from the final rounds:\n"
         "the defaults (twice, two pipelines) and the sweep's three fastest measured again, each once per round,\n"
         "as `sluice bench` measures its rows. IQR: the middle half of the runs, over the median.\n";
  tools::TextTable model({"workload", "size", "settings", "model within 10%", "median |error|", "worst error"});
  for (const auto& c : cases) {
    if (c.replayed) continue;
    const ModelErrors e = model_errors(c);
    model.add_row({c.workload, format_bytes(c.bytes), std::to_string(e.count),
                   fmt::format("{} of {}", e.within_10_percent, e.count), fmt::format("{:.1f}%", 100 * e.median_abs),
                   fmt::format("{:+.1f}%", 100 * e.worst)});
  }
  const bool any_modelled = std::any_of(cases.begin(), cases.end(), [](const TuneCase& c) { return !c.replayed; });
  if (any_modelled) out += "\nThe model over the sweep (target: within 10% of measured):\n" + model.render();
  for (const auto& c : cases) {
    out += fmt::format("\n{} {}: the sweep, fastest first\n", c.workload, format_bytes(c.bytes));
    tools::TextTable table({"setting", "ms", "IQR", "vs best", "model ms", "error", "verified"});
    for (const auto& p : c.sweep)
      table.add_row({p.label, fmt::format("{:.3f}", p.row.ms.median),
                     fmt::format("{:.1f}%", 100 * relative_spread(p.row)),
                     fmt::format("{:.3f}", p.row.ms.median / c.sweep.front().row.ms.median),
                     c.replayed ? "-" : fmt::format("{:.3f}", p.model_ms),
                     c.replayed ? "-" : fmt::format("{:+.0f}%", 100 * (p.model_ms / p.row.ms.median - 1)),
                     p.row.verified ? "yes" : "NO"});
    out += table.render();
  }
  out += "\n";
  out += targets_text(check_targets(cases));
  return out;
}

namespace {

// A setting as the model reads it (with_setting).
nlohmann::json options_json(const PipelineOptions& o) {
  return {{"chunk_items", o.chunk_items},
          {"first_chunk_items", o.first_chunk_items},
          {"ramp", o.ramp},
          {"depth", o.depth},
          {"compute_streams", compute_stream_count(o)}};
}

// The model's input but for the options: the engine rates, the fixed costs, the kernel and the spans.
nlohmann::json model_input_json(const ModelInput& in) {
  const EngineRates& r = in.rates;
  const FixedCosts& f = in.fixed;
  nlohmann::json spans = nlohmann::json::array();
  for (const SpanShape& s : in.spans)
    spans.push_back({{"role", s.role == SpanRole::input ? "input" : s.role == SpanRole::output ? "output" : "inout"},
                     {"path", to_string(s.path)},
                     {"item_bytes", s.item_bytes}});
  return {{"items", in.items},
          {"spans", spans},
          {"kernel_ms_per_item", in.kernel.ms_per_item},
          {"kernel_fixed_ms", in.kernel.fixed_ms},
          {"rates_gbps", {{"h2d", r.h2d_gbps},
                          {"d2h", r.d2h_gbps},
                          {"both", r.both_gbps},
                          {"h2d_heavy", {r.h2d_heavy.h2d_gbps, r.h2d_heavy.d2h_gbps}},
                          {"d2h_heavy", {r.d2h_heavy.h2d_gbps, r.d2h_heavy.d2h_gbps}},
                          {"stage_in", r.stage_in_gbps},
                          {"stage_out", r.stage_out_gbps},
                          {"stage_both", r.stage_both_gbps},
                          {"staging_beside_link", {r.staging_beside_link.stage_gbps, r.staging_beside_link.link_gbps}}}},
          {"fixed_ms", {{"copy", f.copy_ms},
                        {"launch", f.launch_ms},
                        {"wake", f.wake_ms},
                        {"chunk", f.chunk_ms},
                        {"run", f.run_ms},
                        {"stage", f.stage_ms}}}};
}

}  // namespace

std::string tune_json(const std::vector<TuneCase>& cases, int indent) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : cases) {
    nlohmann::json sweep = nlohmann::json::array();
    for (const auto& p : c.sweep) {
      nlohmann::json j = row_json(p.row);
      j["setting"] = p.label;
      j["options"] = options_json(p.options);
      j["model_ms"] = c.replayed ? nlohmann::json(nullptr) : nlohmann::json(p.model_ms);
      sweep.push_back(j);
    }
    nlohmann::json finalists = nlohmann::json::array();
    for (const auto& p : c.finalists) {
      nlohmann::json j = row_json(p.row);
      j["setting"] = p.label;
      finalists.push_back(j);
    }
    const ModelErrors e = model_errors(c);
    out.push_back({{"workload", c.workload},
                   {"bytes", c.bytes},
                   {"bound_ms", c.bound_ms},
                   {"bound_term", c.bound_term},
                   {"replayed", c.replayed},
                   {"defaults", row_json(c.defaults)},
                   {"defaults_again", row_json(c.defaults_again)},
                   {"finalists", finalists},
                   {"sweep", sweep},
                   {"model_pick", c.replayed ? nlohmann::json(nullptr) : nlohmann::json(c.model_label)},
                   {"model_pick_ms", c.replayed ? nlohmann::json(nullptr) : nlohmann::json(c.model_pick_ms)},
                   {"model_input", c.replayed ? nlohmann::json(nullptr) : model_input_json(c.model_input)},
                   {"model_errors", c.replayed ? nlohmann::json(nullptr)
                                               : nlohmann::json{{"median_abs", e.median_abs},
                                                                {"worst", e.worst},
                                                                {"within_10_percent", e.within_10_percent},
                                                                {"count", e.count}}},
                   {"all_verified", c.all_verified()}});
  }
  const auto checks = check_targets(cases);
  return nlohmann::json{{"cases", out}, {"targets", targets_json(checks)}}.dump(indent);
}

}  // namespace sluice::bench
