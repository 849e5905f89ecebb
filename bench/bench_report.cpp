#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "bench_result.hpp"
#include "sluice/byte_size.hpp"
#include "sluice/text_table.hpp"

namespace sluice::bench {

namespace {
constexpr std::size_t target_min_bytes = std::size_t{256} << 20;

const BenchRow* find_row(const BenchResult& r, const std::string& workload, std::size_t bytes, bool sluice,
                         bool pageable) {
  for (const auto& row : r.rows)
    if (row.workload == workload && row.bytes == bytes && row.sluice == sluice && row.pageable == pageable) return &row;
  return nullptr;
}
}  // namespace

std::vector<TargetCheck> check_targets(const BenchResult& r) {
  std::vector<TargetCheck> checks;
  for (const auto& b : r.bounds) {
    if (b.bytes < target_min_bytes) continue;
    const std::string case_name = b.workload + " " + format_bytes(b.bytes);
    const BenchRow* pinned = find_row(r, b.workload, b.bytes, true, false);
    const BenchRow* pageable = find_row(r, b.workload, b.bytes, true, true);
    if (pinned) {
      checks.push_back({fmt::format("{}: pinned efficiency {:.3f} >= 0.95", case_name, pinned->efficiency),
                        pinned->verified && pinned->efficiency >= 0.95});
      const BenchRow* best_peer = nullptr;
      for (const auto& row : r.rows)
        if (row.workload == b.workload && row.bytes == b.bytes && !row.sluice && !row.pageable &&
            (!best_peer || row.ms.median < best_peer->ms.median))
          best_peer = &row;
      if (best_peer)
        checks.push_back({fmt::format("{}: sluice {:.2f} ms ahead of best peer ({}, {:.2f} ms)", case_name,
                                      pinned->ms.median, best_peer->method, best_peer->ms.median),
                          pinned->verified && pinned->ms.median < best_peer->ms.median});
    }
    if (pinned && pageable)
      checks.push_back({fmt::format("{}: pageable/pinned throughput {:.3f} >= 0.85", case_name,
                                    pageable->gbps / pinned->gbps),
                        pageable->verified && pageable->gbps >= 0.85 * pinned->gbps});
  }
  return checks;
}

std::string bench_text(const BenchResult& r) {
  std::string out = fmt::format("GPU {}: {} ({} copy engines); medians of {} runs after warm-up\n\n", r.device.ordinal,
                                r.device.name, r.device.async_engine_count, r.repeats);
  TextTable table({"workload", "size", "method", "ms", "GB/s", "vs sync", "efficiency", "verified"});
  for (const auto& b : r.bounds) {
    for (const auto& row : r.rows) {
      if (row.workload != b.workload || row.bytes != b.bytes) continue;
      table.add_row({row.workload, format_bytes(row.bytes), row.method, fmt::format("{:.2f}", row.ms.median),
                     fmt::format("{:.1f}", row.gbps), fmt::format("{:.2f}x", row.speedup),
                     fmt::format("{:.3f}", row.efficiency), row.verified ? "yes" : "NO: " + row.detail});
    }
    table.add_row({b.workload, format_bytes(b.bytes), "bound: " + b.bound.limiter, fmt::format("{:.2f}", b.bound.ms),
                   "", "", "1.000", ""});
  }
  out += table.render();
  out += "\nbound = max(H2D alone, kernel alone, D2H alone, all bytes at the both-ways rate), measured in this run;\n"
         "efficiency = bound / time; GB/s counts input and output bytes; size is per array.\n";
  const auto checks = check_targets(r);
  if (!checks.empty()) {
    out += "\nTargets (sizes >= 256 MiB):\n";
    for (const auto& c : checks) out += fmt::format("  [{}] {}\n", c.met ? "met" : "MISSED", c.what);
  }
  return out;
}

std::string bench_json(const BenchResult& r, int indent) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows)
    rows.push_back({{"workload", row.workload},
                    {"bytes_per_array", row.bytes},
                    {"method", row.method},
                    {"sluice", row.sluice},
                    {"pageable", row.pageable},
                    {"median_ms", row.ms.median},
                    {"min_ms", row.ms.min},
                    {"max_ms", row.ms.max},
                    {"gbps", row.gbps},
                    {"speedup_vs_sync", row.speedup},
                    {"efficiency", row.efficiency},
                    {"verified", row.verified},
                    {"detail", row.detail}});
  nlohmann::json bounds = nlohmann::json::array();
  for (const auto& b : r.bounds)
    bounds.push_back({{"workload", b.workload},
                      {"bytes_per_array", b.bytes},
                      {"bound_ms", b.bound.ms},
                      {"limiter", b.bound.limiter},
                      {"h2d_ms", b.costs.h2d_ms},
                      {"kernel_ms", b.costs.kernel_ms},
                      {"d2h_ms", b.costs.d2h_ms},
                      {"bidirectional_gbps", b.costs.bidirectional_gbps}});
  nlohmann::json targets = nlohmann::json::array();
  for (const auto& c : check_targets(r)) targets.push_back({{"what", c.what}, {"met", c.met}});
  return nlohmann::json{{"device", r.device.name}, {"repeats", r.repeats}, {"rows", rows}, {"bounds", bounds},
                        {"targets", targets}}
      .dump(indent);
}

}  // namespace sluice::bench
