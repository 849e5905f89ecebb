#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "bench_result.hpp"
#include "sluice/byte_size.hpp"
#include "text_table.hpp"

namespace sluice::bench {

namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;

nlohmann::json rates_json(const HostCopyRates& h) {
  nlohmann::json j{{"stage_in_gbps", h.stage_in_gbps}, {"stage_out_gbps", h.stage_out_gbps}, {"both_gbps", h.both_gbps}};
  if (h.link_gbps > 0) j["link_gbps"] = h.link_gbps;
  return j;
}
nlohmann::json point_json(const LinkPoint& p) { return {{"h2d_gbps", p.h2d_gbps}, {"d2h_gbps", p.d2h_gbps}}; }

std::vector<const MeasuredRow*> rows_of(const BenchResult& r, const BenchCase& c) {
  std::vector<const MeasuredRow*> out;
  for (const auto& row : r.rows)
    if (row.workload == c.workload && row.bytes == c.bytes) out.push_back(&row);
  return out;
}

const MeasuredRow* find(const std::vector<const MeasuredRow*>& rows, const std::string& method) {
  for (const auto* row : rows)
    if (row->method == method) return row;
  return nullptr;
}

const MeasuredRow* find_prefix(const std::vector<const MeasuredRow*>& rows, const std::string& prefix) {
  for (const auto* row : rows)
    if (row->method.rfind(prefix, 0) == 0) return row;
  return nullptr;
}

std::string model_error(const MeasuredRow& row) {
  if (!row.model_ms) return "";
  return fmt::format("{:+.0f}%", 100.0 * (*row.model_ms - row.ms.median) / row.ms.median);
}
}  // namespace

std::vector<TargetCheck> check_targets(const BenchResult& r) {
  std::vector<TargetCheck> checks;
  for (const auto& c : r.cases) {
    if (c.file) continue;
    const auto rows = rows_of(r, c);
    const std::string name = c.workload + " " + format_bytes(c.bytes);
    const MeasuredRow* pinned = find(rows, "sluice pinned");
    if (!pinned) continue;
    for (const auto* row : rows)
      if (row->efficiency > 1.02)
        checks.push_back({fmt::format("{} {}: efficiency {:.3f} <= 1.00 (else the bound is wrong)", name, row->method,
                                      row->efficiency),
                          false});
    if (c.bytes >= 256 * MiB)
      checks.push_back({fmt::format("{}: pinned efficiency {:.3f} >= 0.95", name, pinned->efficiency),
                        pinned->verified && pinned->efficiency >= 0.95});
    const MeasuredRow* best_peer = nullptr;
    for (const auto* row : rows)
      if (!row->sluice && row->memory == "pinned" && (!best_peer || row->ms.median < best_peer->ms.median)) best_peer = row;
    if (best_peer && c.bytes >= 64 * MiB)
      checks.push_back({fmt::format("{}: sluice {:.2f} ms ahead of the best peer ({}, {:.2f} ms)", name,
                                    pinned->ms.median, best_peer->method, best_peer->ms.median),
                        pinned->verified && pinned->ms.median < best_peer->ms.median});
    if (const MeasuredRow* sync = find(rows, "synchronous"); sync && c.bytes < 64 * MiB)
      checks.push_back({fmt::format("{}: sluice {:.3f} ms no slower than synchronous {:.3f} ms", name, pinned->ms.median,
                                    sync->ms.median),
                        pinned->ms.median <= sync->ms.median});
    if (const MeasuredRow* staged = find(rows, "sluice pageable, staged"))
      checks.push_back({fmt::format("{}: pageable staged {:.3f} of the host-aware bound ({}) >= 0.90", name,
                                    staged->efficiency, staged->bound_term),
                        staged->verified && staged->efficiency >= 0.90});
    const MeasuredRow* later = find_prefix(rows, "sluice pageable, automatic, runs after");
    if (later)
      checks.push_back({fmt::format("{}: automatic, later runs at {:.3f} of pinned speed >= 0.95", name,
                                    pinned->ms.median / later->ms.median),
                        later->verified && pinned->ms.median / later->ms.median >= 0.95});
    const MeasuredRow* first = find(rows, "sluice pageable, automatic, first run");
    const MeasuredRow* staged = find(rows, "sluice pageable, staged");
    if (first && staged)
      checks.push_back({fmt::format("{}: automatic first run {:.2f} ms no slower than staging {:.2f} ms (+3%)", name,
                                    first->ms.median, staged->ms.median),
                        first->ms.median <= staged->ms.median * 1.03});
    for (const auto* row : rows)
      if (row->model_ms)
        checks.push_back({fmt::format("{} {}: model {:.2f} ms within 10% of {:.2f} ms", name, row->method, *row->model_ms,
                                      row->ms.median),
                          std::fabs(*row->model_ms - row->ms.median) <= 0.10 * row->ms.median});
  }
  return checks;
}

std::string bench_text(const BenchResult& r) {
  std::string out = fmt::format("GPU {}: {} ({} copy engines); medians of {} runs after warm-up\n", r.device.ordinal,
                                r.device.name, r.device.async_engine_count, r.repeats);
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
  tools::TextTable table(
      {"workload", "size", "method", "ms", "GB/s", "vs sync", "bound ms", "set by", "efficiency", "model ms", "error", "verified"});
  for (const auto& c : r.cases) {
    for (const auto* row : rows_of(r, c))
      table.add_row({row->workload, format_bytes(row->bytes), row->method, fmt::format("{:.2f}", row->ms.median),
                     fmt::format("{:.1f}", row->gbps), row->speedup > 0 ? fmt::format("{:.2f}x", row->speedup) : "",
                     fmt::format("{:.2f}", row->bound_ms), row->bound_term, fmt::format("{:.3f}", row->efficiency),
                     row->model_ms ? fmt::format("{:.2f}", *row->model_ms) : "", model_error(*row),
                     row->verified ? "yes" : "NO: " + row->detail});
    auto terms_row = [&](const char* label, const Bound& bound) {
      std::string terms;
      for (const auto& t : bound.terms) terms += fmt::format("{} {:.2f}, ", t.name, t.ms);
      if (terms.empty()) return;
      terms.resize(terms.size() - 2);
      table.add_row({c.workload, format_bytes(c.bytes), label + terms, "", "", "", "", "", "", "", "", ""});
    };
    terms_row("bound terms: ", c.bound.pinned);
    if (!c.file) terms_row("staged bound terms: ", c.bound.staged);
  }
  out += table.render();
  out += "\nbound = max(every engine alone at its best, measured in this run): link rates from large transfers, the\n"
         "kernel alone over all the data, host staging for pageable rows (alone, and sharing host memory with the\n"
         "link's copies), storage for file rows. efficiency = bound / time. GB/s counts input and output bytes;\n"
         "size is per array (file rows: the file).\n";
  for (const auto& note : r.notes) out += "note: " + note + "\n";
  const auto checks = check_targets(r);
  if (!checks.empty()) {
    out += "\nTargets:\n";
    for (const auto& c : checks) out += fmt::format("  [{}] {}\n", c.met ? "met" : "MISSED", c.what);
  }
  return out;
}

std::string bench_json(const BenchResult& r, int indent) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows) {
    nlohmann::json j{{"workload", row.workload},   {"bytes", row.bytes},         {"method", row.method},
                     {"sluice", row.sluice},       {"memory", row.memory},       {"median_ms", row.ms.median},
                     {"min_ms", row.ms.min},       {"max_ms", row.ms.max},       {"gbps", row.gbps},
                     {"speedup_vs_sync", row.speedup}, {"bound_ms", row.bound_ms}, {"bound_term", row.bound_term},
                     {"efficiency", row.efficiency}, {"verified", row.verified}, {"detail", row.detail}};
    if (row.model_ms) j["model_ms"] = *row.model_ms;
    rows.push_back(j);
  }
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : r.cases) {
    nlohmann::json terms = nlohmann::json::array();
    for (const auto& t : c.bound.pinned.terms) terms.push_back({{"name", t.name}, {"ms", t.ms}});
    cases.push_back({{"workload", c.workload},
                     {"bytes", c.bytes},
                     {"kernel_ms", c.bound.kernel_ms},
                     {"bound_ms", c.bound.pinned.ms},
                     {"limiter", c.bound.pinned.limiter},
                     {"staged_bound_ms", c.bound.staged.ms},
                     {"staged_limiter", c.bound.staged.limiter},
                     {"terms", terms}});
  }
  nlohmann::json targets = nlohmann::json::array();
  for (const auto& c : check_targets(r)) targets.push_back({{"what", c.what}, {"met", c.met}});
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
                        {"targets", targets}}
      .dump(indent);
}

}  // namespace sluice::bench
