#pragma once
// The targets sluice holds itself to, checked on one bench call or one
// tune call, each a measured ratio with a verdict: met, missed, or not
// measured (the call left out what it needs, and says what). Where a target
// compares two rows, the verdict goes by their medians and says whether
// their spreads resolve the lead (noise.hpp). Host-only.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench_result.hpp"
#include "tune_result.hpp"

namespace sluice::bench {

// The rows the targets look for, by the names the bench gives them.
namespace row_names {
inline constexpr const char* pinned = "sluice pinned";
inline constexpr const char* pinned_again = "sluice pinned, again (a second pipeline, same settings)";
inline constexpr const char* replayed = "sluice pinned, replayed";
inline constexpr const char* staged = "sluice pageable, staged";
inline constexpr const char* registered = "sluice pageable, registered by the caller";
inline constexpr const char* file_reduction_run_stream = "sluice, file source, run(stream), 16 MiB chunks";
}  // namespace row_names

enum class Verdict { met, missed, not_measured };
const char* to_string(Verdict verdict);

struct TargetCheck {
  std::string target;  // which target (one of the names below)
  std::string what;    // the case, the measured ratio and what it is held to
  Verdict verdict = Verdict::not_measured;
  std::optional<bool> resolved;  // comparisons of two rows: whether their spreads tell the lead apart
  // Not measured for one reason in several cases or sizes: one check names them all.
  std::size_t cases = 1;
};

// The targets by name; checks are listed, and summed up, in this order.
namespace target_names {
inline constexpr const char* ahead_of_hand_written = "pinned: no slower than the best hand-written peer";
inline constexpr const char* ahead_of_pytorch = "pinned: no slower than the best PyTorch row";
inline constexpr const char* near_bound = "pinned: >= 0.97 of the bound at >= 1 GiB, >= 0.90 from 64 MiB";
inline constexpr const char* replay_faster = "replayed: faster than run() at 4-64 MiB";
inline constexpr const char* replay_small_copy = "replayed: 4 MiB copy >= 0.55 of the bound";
inline constexpr const char* staged_near_bound = "pageable staged at >= 256 MiB: >= 0.90 of the host-aware bound (or >= 0.95 of the host alone)";
inline constexpr const char* file_reduction = "file reduction, run(stream), 16 MiB chunks: >= 0.85 of the H2D bound";
inline constexpr const char* same_engine = "one engine reads alike: two pipelines of one setting within their spread";
inline constexpr const char* bound_holds = "no row beats its bound (efficiency <= 1.02)";
inline constexpr const char* tune_defaults = "tune: defaults within 3% of the sweep's best at 4 MiB-1 GiB";
inline constexpr const char* tune_model = "tune: the model within 10% of every setting swept";
inline constexpr const char* tune_same_engine = "tune: the defaults twice, within their spread";
}  // namespace target_names

// The sizes the pinned targets ask for, every workload at each.
std::vector<std::size_t> target_sizes();

std::vector<TargetCheck> check_targets(const BenchResult& result);
std::vector<TargetCheck> check_targets(const std::vector<TuneCase>& cases);

// One line per target: how many cases met, missed or were not measured,
// and what missed; then the sizes the call left out.
struct TargetSummary {
  std::string target;
  int met = 0, missed = 0;
  std::size_t not_measured = 0;  // cases or sizes
  int missed_within_noise = 0;  // of the missed: leads the spreads do not resolve
  std::vector<std::string> misses;  // the `what` of each miss
  Verdict verdict() const;  // missed if any missed, else met if any met, else not measured
};
std::vector<TargetSummary> summarize_targets(const std::vector<TargetCheck>& checks);

// The checks, then the summary, as the end of the bench's or tuner's text.
std::string targets_text(const std::vector<TargetCheck>& checks);
// {"checks": [...], "summary": [...]}.
nlohmann::json targets_json(const std::vector<TargetCheck>& checks);

}  // namespace sluice::bench
