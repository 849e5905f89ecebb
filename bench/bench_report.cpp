// `sluice bench`'s report: the rows of every case with their spread, bound
// and model, the fixed costs of the rows that were timed for them, and the
// targets; or the same as JSON.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "bench_result.hpp"
#include "noise.hpp"
#include "sluice/core/byte_size.hpp"
#include "targets.hpp"
#include "text_table.hpp"

namespace sluice::bench {

namespace {

nlohmann::json rates_json(const HostCopyRates& h) {
  nlohmann::json j{{"stage_in_gbps", h.stage_in_gbps}, {"stage_out_gbps", h.stage_out_gbps}, {"both_gbps", h.both_gbps}};
  if (h.link_gbps > 0) j["link_gbps"] = h.link_gbps;
  return j;
}
nlohmann::json point_json(const LinkPoint& p) { return {{"h2d_gbps", p.h2d_gbps}, {"d2h_gbps", p.d2h_gbps}}; }

std::string model_error(const MeasuredRow& row) {
  if (!row.model_ms) return "";
  return fmt::format("{:+.0f}%", 100.0 * (*row.model_ms - row.ms.median) / row.ms.median);
}

std::string spread_cell(const MeasuredRow& row) {
  if (row.samples.size() < min_samples_to_resolve) return "";
  return fmt::format("{:.1f}%", 100 * spread_of(row.samples).relative);
}

std::vector<std::string> row_cells(const MeasuredRow& row) {
  if (!row.measured())
    return {row.workload, format_bytes(row.bytes), row.method, "n/a", "", "", "", "", "", "", "", "", "not available: " + row.unavailable};
  return {row.workload,
          format_bytes(row.bytes),
          row.method,
          fmt::format("{:.3f}", row.ms.median),
          spread_cell(row),
          fmt::format("{:.1f}", row.gbps),
          row.speedup > 0 ? fmt::format("{:.2f}x", row.speedup) : "",
          fmt::format("{:.3f}", row.bound_ms),
          row.bound_term,
          fmt::format("{:.3f}", row.efficiency),
          row.model_ms ? fmt::format("{:.3f}", *row.model_ms) : "",
          model_error(row),
          row.verified ? "yes" : "NO: " + row.detail};
}

// One line of the table that is not a row: the bound's terms, the host alone.
std::vector<std::string> note_cells(const BenchCase& c, std::string text) {
  std::vector<std::string> cells(13);
  cells[0] = c.workload;
  cells[1] = format_bytes(c.bytes);
  cells[2] = std::move(text);
  return cells;
}

std::string fixed_costs_text(const BenchResult& r) {
  tools::TextTable table({"workload", "size", "method", "call to first copy ms", "last copy to return ms", "host us per chunk"});
  // Only some of sluice's rows are timed stage by stage (not the second
  // pipeline nor the replayed one): the note is for a build whose reports
  // carry no fixed costs at all.
  bool pipeline_rows = false, pipeline_filled = false;
  for (const auto& row : r.rows) {
    if (!row.measured()) continue;
    const bool pipeline_row = row.kind == RowKind::sluice && row.memory == "pinned";
    pipeline_rows = pipeline_rows || pipeline_row;
    if (!row.overhead) continue;
    pipeline_filled = pipeline_filled || pipeline_row;
    table.add_row({row.workload, format_bytes(row.bytes), row.method, fmt::format("{:.3f}", row.overhead->start_ms),
                   fmt::format("{:.3f}", row.overhead->end_ms), fmt::format("{:.1f}", row.overhead->host_us_per_chunk)});
  }
  const bool pipeline_unfilled = pipeline_rows && !pipeline_filled;
  std::string out;
  if (table.row_count() > 0)
    out += "\nFixed costs of a run (medians of runs with their stages timed, apart from the timed runs; peers' from\n"
           "their recorded runs: host clock at the call and return, events around every copy):\n" +
           table.render();
  if (pipeline_unfilled)
    out += "\nFixed costs of sluice's runs: not available (this build's run reports leave RunReport::overhead at 0).\n";
  return out;
}

nlohmann::json row_json(const MeasuredRow& row) {
  nlohmann::json j{{"workload", row.workload}, {"bytes", row.bytes},   {"method", row.method},
                   {"kind", to_string(row.kind)}, {"sluice", row.sluice()}, {"memory", row.memory}};
  if (!row.measured()) {
    j["unavailable"] = row.unavailable;
    return j;
  }
  const Spread s = spread_of(row.samples.empty() ? std::vector<double>{row.ms.median} : row.samples);
  j.update({{"median_ms", row.ms.median},   {"min_ms", row.ms.min},         {"max_ms", row.ms.max},
            {"q25_ms", s.q25},              {"q75_ms", s.q75},              {"spread", s.relative},
            {"samples_ms", row.samples},    {"gbps", row.gbps},             {"speedup_vs_sync", row.speedup},
            {"bound_ms", row.bound_ms},     {"bound_term", row.bound_term}, {"efficiency", row.efficiency},
            {"verified", row.verified},     {"detail", row.detail}});
  if (row.model_ms) j["model_ms"] = *row.model_ms;
  j["overhead"] = row.overhead ? nlohmann::json{{"start_ms", row.overhead->start_ms},
                                                {"end_ms", row.overhead->end_ms},
                                                {"host_us_per_chunk", row.overhead->host_us_per_chunk},
                                                {"prepare_ms", row.overhead->prepare_ms}}
                               : nlohmann::json(nullptr);
  return j;
}

}  // namespace

void CaseBound::recompute(const EngineRates& best) {
  rates = best;
  pinned = compute_bound(pinned_volume, rates);
  const bool staged_known = staged_volume.staged_in_bytes > 0 || staged_volume.staged_out_bytes > 0;
  staged = staged_known ? compute_bound(staged_volume, rates) : Bound{};
}

std::vector<const MeasuredRow*> rows_of(const BenchResult& r, const BenchCase& c) {
  std::vector<const MeasuredRow*> out;
  for (const auto& row : r.rows)
    if (row.workload == c.workload && row.bytes == c.bytes) out.push_back(&row);
  return out;
}

std::string bench_text(const BenchResult& r) {
  std::string out = fmt::format(
      "GPU {}: {} ({} copy engines); medians of {} timed rounds at 256 MiB and more, up to 8x as many below, after a\n"
      "warm-up round; IQR: the middle half of a row's runs, over its median\n",
      r.device.ordinal, r.device.name, r.device.async_engine_count, r.repeats);
  out += fmt::format("link at its best: H2D {:.1f}, D2H {:.1f}, both ways {:.1f} GB/s (2:1 in {:.1f} + {:.1f}, 1:2 {:.1f} + "
                     "{:.1f} out)",
                     r.link.h2d_gbps, r.link.d2h_gbps, r.link.both_gbps, r.link.h2d_heavy.h2d_gbps,
                     r.link.h2d_heavy.d2h_gbps, r.link.d2h_heavy.h2d_gbps, r.link.d2h_heavy.d2h_gbps);
  if (r.host.threads > 0)
    out += fmt::format("\nhost staging ({} threads) at its best: in {:.1f}, out {:.1f}, both {:.1f} GB/s "
                       "(while the link streams: {:.1f}, {:.1f}, {:.1f}; link idle: {:.1f}, {:.1f}, {:.1f})",
                       r.host.threads, r.host_best.stage_in_gbps, r.host_best.stage_out_gbps, r.host_best.both_gbps,
                       r.host.stage_in_gbps, r.host.stage_out_gbps, r.host.both_gbps, r.host_idle_link.stage_in_gbps,
                       r.host_idle_link.stage_out_gbps, r.host_idle_link.both_gbps);
  if (r.staging_beside_link.known())
    out += fmt::format("\nhost memory shared: staging both ways {:.1f} GB/s while the link moved {:.1f} GB/s both ways",
                       r.staging_beside_link.stage_gbps, r.staging_beside_link.link_gbps);
  out += "\n\n";
  tools::TextTable table({"workload", "size", "method", "ms", "IQR", "GB/s", "vs sync", "bound ms", "set by", "efficiency",
                          "model ms", "error", "verified"});
  for (const auto& c : r.cases) {
    for (const auto* row : rows_of(r, c)) table.add_row(row_cells(*row));
    auto terms_row = [&](const char* label, const Bound& bound) {
      std::string terms;
      for (const auto& t : bound.terms) terms += fmt::format("{} {:.3f}, ", t.name, t.ms);
      if (terms.empty()) return;
      terms.resize(terms.size() - 2);
      table.add_row(note_cells(c, label + terms));
    };
    terms_row("bound terms: ", c.bound.pinned);
    if (!c.file) terms_row("staged bound terms: ", c.bound.staged);
    if (c.host_alone && c.host_alone->measured())
      table.add_row(note_cells(c, fmt::format("host alone, staging both ways with no GPU work: {:.3f} ms (IQR {})",
                                              c.host_alone->ms.median, spread_cell(*c.host_alone))));
  }
  out += table.render();
  out += "\nbound = max(every engine alone at its best, measured in this run): link rates from large transfers, the\n"
         "kernel alone over all the data, host staging for pageable rows (alone, and sharing host memory with the\n"
         "link's copies), storage for file rows. efficiency = bound / time. GB/s counts input and output bytes;\n"
         "size is per array (file rows: the file).\n";
  out += fixed_costs_text(r);
  for (const auto& note : r.notes) out += "note: " + note + "\n";
  if (const auto checks = check_targets(r); !checks.empty()) {
    out += "\n";
    out += targets_text(checks);
    out += "  (the tuner's targets: `sluice tune`; Python against C++: bench/python_bench.py)\n";
  }
  return out;
}

std::string bench_json(const BenchResult& r, int indent) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows) rows.push_back(row_json(row));
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : r.cases) {
    nlohmann::json terms = nlohmann::json::array();
    for (const auto& t : c.bound.pinned.terms) terms.push_back({{"name", t.name}, {"ms", t.ms}});
    nlohmann::json j{{"workload", c.workload},
                     {"bytes", c.bytes},
                     {"file", c.file},
                     {"kernel_ms", c.bound.kernel_ms},
                     {"bound_ms", c.bound.pinned.ms},
                     {"limiter", c.bound.pinned.limiter},
                     {"staged_bound_ms", c.bound.staged.ms},
                     {"staged_limiter", c.bound.staged.limiter},
                     {"terms", terms}};
    j["host_alone"] = c.host_alone && c.host_alone->measured() ? row_json(*c.host_alone) : nlohmann::json(nullptr);
    cases.push_back(j);
  }
  nlohmann::json host = rates_json(r.host_best);  // the bound's host term, with how it was measured beside it
  host["threads"] = r.host.threads;
  host["while_link_streams"] = rates_json(r.host);
  host["link_idle"] = rates_json(r.host_idle_link);
  host["staging_beside_link"] = {{"stage_gbps", r.staging_beside_link.stage_gbps},
                                 {"link_gbps", r.staging_beside_link.link_gbps}};
  return nlohmann::json{{"device", r.device.name},
                        {"repeats", r.repeats},
                        {"link", {{"h2d_gbps", r.link.h2d_gbps},
                                  {"d2h_gbps", r.link.d2h_gbps},
                                  {"both_gbps", r.link.both_gbps},
                                  {"h2d_heavy", point_json(r.link.h2d_heavy)},
                                  {"d2h_heavy", point_json(r.link.d2h_heavy)}}},
                        {"host", host},
                        {"rows", rows},
                        {"cases", cases},
                        {"notes", r.notes},
                        {"targets", targets_json(check_targets(r))}}
      .dump(indent);
}

}  // namespace sluice::bench
