#include "targets.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "noise.hpp"
#include "sluice/core/byte_size.hpp"

namespace sluice::bench {

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

const MeasuredRow* find(const std::vector<const MeasuredRow*>& rows, const std::string& method) {
  for (const auto* row : rows)
    if (row->method == method) return row;
  return nullptr;
}

// The fastest measured row of a kind over pinned memory, if any.
const MeasuredRow* fastest(const std::vector<const MeasuredRow*>& rows, RowKind kind) {
  const MeasuredRow* best = nullptr;
  for (const auto* row : rows)
    if (row->kind == kind && row->memory == "pinned" && row->measured() && (!best || row->ms.median < best->ms.median))
      best = row;
  return best;
}

// A row's runs; a row read back with its median alone counts as one run (it resolves nothing).
std::vector<double> runs_of(const MeasuredRow& row) {
  return row.samples.empty() ? std::vector<double>{row.ms.median} : row.samples;
}

std::string case_name(const BenchCase& c) { return c.workload + " " + format_bytes(c.bytes); }

TargetCheck not_measured(const char* target, std::string why) { return {target, std::move(why), Verdict::not_measured, {}}; }

TargetCheck held_to(const char* target, bool met, std::string what) {
  return {target, std::move(what), met ? Verdict::met : Verdict::missed, {}};
}

// `mine` no slower than `other`, by their medians, with whether the spreads resolve it.
TargetCheck no_slower(const char* target, const std::string& name, const MeasuredRow& mine, const MeasuredRow& other) {
  const Lead lead = lead_of(runs_of(mine), runs_of(other));
  const bool met = mine.verified && other.verified && mine.ms.median <= other.ms.median;
  std::string what = fmt::format("{}: {} {:.3f} ms, {} {:.3f} ms: {}", name, mine.method, mine.ms.median, other.method,
                                 other.ms.median, describe(lead));
  if (!mine.verified || !other.verified) what += " (a row is not verified)";
  return {target, std::move(what), met ? Verdict::met : Verdict::missed, lead.resolvable ? std::optional(lead.resolved) : std::nullopt};
}

// Two rows of one engine and one setting should differ by no more than their spread.
TargetCheck alike(const char* target, const std::string& name, const MeasuredRow& a, const MeasuredRow& b) {
  const Lead lead = lead_of(runs_of(a), runs_of(b));
  const std::string what = fmt::format("{}: {:.3f} and {:.3f} ms, {:+.1f}% apart (IQR {:.1f}% and {:.1f}%)", name,
                                       a.ms.median, b.ms.median, 100 * (b.ms.median / a.ms.median - 1),
                                       100 * spread_of(runs_of(a)).relative, 100 * spread_of(runs_of(b)).relative);
  if (!lead.resolvable) return not_measured(target, what + ": too few runs to tell");
  return held_to(target, !lead.resolved, what);
}

void check_pinned_case(const BenchCase& c, const std::vector<const MeasuredRow*>& rows, std::vector<TargetCheck>& out) {
  using namespace target_names;
  const std::string name = case_name(c);
  const MeasuredRow* pinned = find(rows, row_names::pinned);
  if (!pinned || !pinned->measured()) return;
  if (const MeasuredRow* peer = fastest(rows, RowKind::hand_written))
    out.push_back(no_slower(ahead_of_hand_written, name, *pinned, *peer));
  if (const MeasuredRow* torch = fastest(rows, RowKind::pytorch))
    out.push_back(no_slower(ahead_of_pytorch, name, *pinned, *torch));
  else
    out.push_back(not_measured(ahead_of_pytorch, name + ": no PyTorch rows (--torch-peer bench/torch_peer.py)"));
  if (c.bytes >= 64 * MiB) {
    const double floor = c.bytes >= GiB ? 0.97 : 0.90;
    out.push_back(held_to(near_bound, pinned->verified && pinned->efficiency >= floor,
                          fmt::format("{}: {:.3f} of the bound ({:.3f} ms, {}), held to {:.2f}", name, pinned->efficiency,
                                      pinned->bound_ms, pinned->bound_term, floor)));
  }
  if (const MeasuredRow* again = find(rows, row_names::pinned_again); again && again->measured())
    out.push_back(alike(same_engine, name + ", sluice pinned twice", *pinned, *again));

  if (c.bytes >= 4 * MiB && c.bytes <= 64 * MiB) {
    const MeasuredRow* replayed = find(rows, row_names::replayed);
    if (!replayed || !replayed->measured()) {
      const std::string why = replayed ? replayed->unavailable : "no replayed row";
      out.push_back(not_measured(replay_faster, name + ": " + why));
      if (c.workload == "copy" && c.bytes == 4 * MiB) out.push_back(not_measured(replay_small_copy, name + ": " + why));
    } else {
      TargetCheck faster = no_slower(replay_faster, name, *replayed, *pinned);
      if (replayed->ms.median == pinned->ms.median) faster.verdict = Verdict::missed;  // faster, not level
      out.push_back(faster);
      if (c.workload == "copy" && c.bytes == 4 * MiB)
        out.push_back(held_to(replay_small_copy, replayed->verified && replayed->efficiency >= 0.55,
                              fmt::format("{}: replayed at {:.3f} of the bound, held to 0.55", name, replayed->efficiency)));
    }
  }
}

void check_staged_case(const BenchCase& c, const std::vector<const MeasuredRow*>& rows, std::vector<TargetCheck>& out) {
  using namespace target_names;
  const MeasuredRow* staged = find(rows, row_names::staged);
  if (c.bytes < 256 * MiB || !staged || !staged->measured()) return;
  const std::string name = case_name(c);
  if (staged->efficiency >= 0.90 || !c.host_alone || !c.host_alone->measured()) {
    out.push_back(held_to(staged_near_bound, staged->verified && staged->efficiency >= 0.90,
                          fmt::format("{}: {:.3f} of the host-aware bound ({:.3f} ms, {}), held to 0.90", name,
                                      staged->efficiency, staged->bound_ms, staged->bound_term)));
    return;
  }
  // Below 0.90: is 0.90 within the host's reach at all? Not where the host
  // alone, with no GPU work, takes longer than 0.90 of the bound allows.
  const double host_ms = c.host_alone->ms.median;
  const double reach = staged->bound_ms / host_ms;
  if (reach >= 0.90) {
    out.push_back(held_to(staged_near_bound, false,
                          fmt::format("{}: {:.3f} of the host-aware bound ({}), held to 0.90; the host alone reaches "
                                      "{:.3f} of it ({:.3f} ms), so the bound is within reach",
                                      name, staged->efficiency, staged->bound_term, reach, host_ms)));
    return;
  }
  const double of_host = host_ms / staged->ms.median;
  out.push_back(held_to(staged_near_bound, staged->verified && of_host >= 0.95,
                        fmt::format("{}: {:.3f} of the host-aware bound, out of the host's reach (the host alone, "
                                    "staging both ways with no GPU work, {:.3f} ms: {:.3f} of the bound); the row at "
                                    "{:.3f} of the host alone, held to 0.95",
                                    name, staged->efficiency, host_ms, reach, of_host)));
}

void check_file_case(const BenchCase& c, const std::vector<const MeasuredRow*>& rows, std::vector<TargetCheck>& out) {
  const MeasuredRow* row = find(rows, row_names::file_reduction_run_stream);
  if (!row || !row->measured()) return;
  const auto h2d = std::find_if(c.bound.pinned.terms.begin(), c.bound.pinned.terms.end(),
                                [](const BoundTerm& t) { return t.name == term::h2d; });
  const std::string name = case_name(c);
  if (h2d == c.bound.pinned.terms.end() || h2d->ms <= 0) {
    out.push_back(not_measured(target_names::file_reduction, name + ": no H2D term in the bound"));
    return;
  }
  const double ratio = h2d->ms / row->ms.median;
  out.push_back(held_to(target_names::file_reduction, row->verified && ratio >= 0.85,
                        fmt::format("{}: {:.3f} ms against the H2D bound {:.3f} ms: {:.3f}, held to 0.85", name,
                                    row->ms.median, h2d->ms, ratio)));
}

// Where several cases are not measured for one reason ("copy 4 MiB: no
// PyTorch rows", "vadd 4 MiB: no PyTorch rows"), one check names them all.
std::vector<TargetCheck> merge_not_measured(const std::vector<TargetCheck>& checks) {
  std::vector<TargetCheck> out;
  std::map<std::pair<std::string, std::string>, std::size_t> merged;  // (target, reason) -> index in out
  for (const auto& c : checks) {
    const auto colon = c.what.find(": ");
    if (c.verdict != Verdict::not_measured || colon == std::string::npos) {
      out.push_back(c);
      continue;
    }
    const std::string subject = c.what.substr(0, colon), reason = c.what.substr(colon + 2);
    const auto key = std::make_pair(c.target, reason);
    if (const auto it = merged.find(key); it != merged.end()) {
      TargetCheck& into = out[it->second];
      into.what = into.what.substr(0, into.what.size() - reason.size() - 2) + ", " + subject + ": " + reason;
      into.cases += c.cases;
      continue;
    }
    merged[key] = out.size();
    out.push_back(c);
  }
  return out;
}

// Grouped by target, in the order of target_names; cases in the order they ran.
std::vector<TargetCheck> in_target_order(std::vector<TargetCheck> checks) {
  using namespace target_names;
  const std::vector<std::string> order{ahead_of_hand_written, ahead_of_pytorch, near_bound,     replay_faster,
                                       replay_small_copy,     staged_near_bound, file_reduction, same_engine,
                                       bound_holds,           tune_defaults,     tune_model,     tune_same_engine};
  auto rank = [&](const TargetCheck& c) { return std::find(order.begin(), order.end(), c.target) - order.begin(); };
  std::stable_sort(checks.begin(), checks.end(), [&](const TargetCheck& a, const TargetCheck& b) { return rank(a) < rank(b); });
  return merge_not_measured(checks);
}

}  // namespace

const char* to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::met: return "met";
    case Verdict::missed: return "missed";
    case Verdict::not_measured: return "not measured";
  }
  return "?";
}

std::vector<std::size_t> target_sizes() { return {4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, GiB, 4 * GiB}; }

std::vector<TargetCheck> check_targets(const BenchResult& r) {
  using namespace target_names;
  std::vector<TargetCheck> checks;
  std::vector<std::size_t> sizes_seen;
  bool file_case = false, staged_rows = false, small_cases = false;
  for (const auto& c : r.cases) {
    const auto rows = rows_of(r, c);
    for (const auto* row : rows)
      if (row->measured() && row->efficiency > 1.02)
        checks.push_back(held_to(bound_holds, false,
                                 fmt::format("{} {}: efficiency {:.3f} (the bound is wrong)", case_name(c), row->method,
                                             row->efficiency)));
    if (c.file) {
      file_case = true;
      check_file_case(c, rows, checks);
      continue;
    }
    sizes_seen.push_back(c.bytes);
    small_cases = small_cases || (c.bytes >= 4 * MiB && c.bytes <= 64 * MiB);
    staged_rows = staged_rows || (c.bytes >= 256 * MiB && find(rows, row_names::staged));
    check_pinned_case(c, rows, checks);
    check_staged_case(c, rows, checks);
  }
  if (!r.cases.empty() && std::none_of(checks.begin(), checks.end(), [](const TargetCheck& t) {
        return t.target == std::string(bound_holds);
      }))
    checks.push_back(held_to(bound_holds, true, fmt::format("every row of {} cases", r.cases.size())));
  for (std::size_t size : target_sizes()) {
    if (std::find(sizes_seen.begin(), sizes_seen.end(), size) != sizes_seen.end()) continue;
    const std::string why = format_bytes(size) + ": not in this call's sizes";
    checks.push_back(not_measured(ahead_of_hand_written, why));
    checks.push_back(not_measured(ahead_of_pytorch, why));
    if (size >= 64 * MiB) checks.push_back(not_measured(near_bound, why));
  }
  if (!small_cases) checks.push_back(not_measured(replay_faster, "no case from 4 to 64 MiB in this call"));
  if (!staged_rows)
    checks.push_back(not_measured(staged_near_bound, "no staged rows at 256 MiB or more (sizes, or --no-host-rows)"));
  if (!file_case) checks.push_back(not_measured(file_reduction, "no file case (--files SIZE)"));
  else if (std::none_of(checks.begin(), checks.end(), [](const TargetCheck& t) { return t.target == std::string(file_reduction); }))
    checks.push_back(not_measured(file_reduction, "no run(stream) row in the file cases"));
  return in_target_order(std::move(checks));
}

std::vector<TargetCheck> check_targets(const std::vector<TuneCase>& cases) {
  using namespace target_names;
  std::vector<TargetCheck> checks;
  for (const auto& c : cases) {
    const std::string name = c.workload + " " + format_bytes(c.bytes);
    if (!c.defaults.measured() || c.sweep.empty()) continue;
    const TunePoint& best = c.best();
    if (c.bytes >= 4 * MiB && c.bytes <= GiB) {
      const double gap = c.defaults.ms.median / best.row.ms.median - 1;
      const Lead lead = lead_of(runs_of(best.row), runs_of(c.defaults));
      TargetCheck t = held_to(tune_defaults, c.all_verified() && gap <= 0.03,
                              fmt::format("{}: defaults {:.3f} ms, best ({}) {:.3f} ms: gap {:+.1f}%, held to +3%; {}",
                                          name, c.defaults.ms.median, best.label, best.row.ms.median, 100 * gap,
                                          lead.resolved ? "resolved" : "level"));
      if (lead.resolvable) t.resolved = lead.resolved;
      checks.push_back(t);
    }
    const ModelErrors e = model_errors(c);
    if (!c.replayed)  // the model plays run(), not a replay
      checks.push_back(held_to(tune_model, e.count > 0 && e.within_10_percent == e.count,
                               fmt::format("{}: {} of {} settings within 10% (median |error| {:.1f}%, worst {:+.1f}%)",
                                           name, e.within_10_percent, e.count, 100 * e.median_abs, 100 * e.worst)));
    if (c.defaults_again.measured()) checks.push_back(alike(tune_same_engine, name, c.defaults, c.defaults_again));
  }
  return in_target_order(std::move(checks));
}

Verdict TargetSummary::verdict() const {
  if (missed > 0) return Verdict::missed;
  if (met > 0) return Verdict::met;
  return Verdict::not_measured;
}

std::vector<TargetSummary> summarize_targets(const std::vector<TargetCheck>& checks) {
  std::vector<TargetSummary> out;
  for (const auto& check : checks) {
    auto it = std::find_if(out.begin(), out.end(), [&](const TargetSummary& s) { return s.target == check.target; });
    if (it == out.end()) it = out.insert(out.end(), TargetSummary{check.target, 0, 0, 0, 0, {}});
    switch (check.verdict) {
      case Verdict::met: ++it->met; break;
      case Verdict::not_measured: it->not_measured += check.cases; break;
      case Verdict::missed:
        ++it->missed;
        if (check.resolved == false) ++it->missed_within_noise;
        it->misses.push_back(check.what);
        break;
    }
  }
  return out;
}

namespace {
std::string label_of(const TargetCheck& c) {
  switch (c.verdict) {
    case Verdict::met: return c.resolved == false ? "met, level" : "met";
    case Verdict::missed: return c.resolved == false ? "MISSED, level" : "MISSED";
    case Verdict::not_measured: return "not measured";
  }
  return "?";
}
}  // namespace

std::string targets_text(const std::vector<TargetCheck>& checks) {
  if (checks.empty()) return "";
  std::string out = "Targets (\"level\": the lead is within the two rows' spreads, so the runs cannot tell it):\n";
  std::string current;
  for (const auto& c : checks) {
    if (c.target != current) out += "  " + (current = c.target) + "\n";
    out += fmt::format("    [{}] {}\n", label_of(c), c.what);
  }
  out += "\nSummary:\n";
  for (const auto& s : summarize_targets(checks)) {
    const char* verdict = s.verdict() == Verdict::missed ? "MISSED" : to_string(s.verdict());
    std::string counts = fmt::format("{} met, {} missed", s.met, s.missed);
    if (s.missed_within_noise > 0) counts += fmt::format(" ({} within noise)", s.missed_within_noise);
    if (s.not_measured > 0) counts += fmt::format(", {} not measured (above)", s.not_measured);
    out += fmt::format("  [{}] {}: {}\n", verdict, s.target, counts);
  }
  return out;
}

nlohmann::json targets_json(const std::vector<TargetCheck>& checks) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& c : checks) {
    nlohmann::json j{{"target", c.target}, {"what", c.what}, {"verdict", to_string(c.verdict)},
                     {"met", c.verdict == Verdict::met}};
    j["resolved"] = c.resolved ? nlohmann::json(*c.resolved) : nlohmann::json(nullptr);
    list.push_back(j);
  }
  nlohmann::json summary = nlohmann::json::array();
  for (const auto& s : summarize_targets(checks))
    summary.push_back({{"target", s.target},
                       {"verdict", to_string(s.verdict())},
                       {"met", s.met},
                       {"missed", s.missed},
                       {"missed_within_noise", s.missed_within_noise},
                       {"not_measured", s.not_measured},
                       {"misses", s.misses}});
  return {{"checks", list}, {"summary", summary}};
}

}  // namespace sluice::bench
