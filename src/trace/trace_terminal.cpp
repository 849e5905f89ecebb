#include "sluice/trace/trace_terminal.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "trace_rows.hpp"

namespace sluice {

std::string terminal_timeline(const Trace& trace, int columns) {
  columns = std::max(columns, 8);
  const double span = trace.span_ms();
  std::string out = trace.title + "\n";
  if (trace.intervals.empty() || span <= 0) return out + "  (no intervals recorded)\n";
  const double cell = span / columns;
  const auto rows = detail::timeline_rows(trace);
  std::size_t label_width = 0;
  for (const auto& r : rows) label_width = std::max(label_width, r.label().size());
  for (const auto& row : rows) {
    std::vector<double> busy(static_cast<std::size_t>(columns), 0.0);
    for (const auto& i : trace.intervals) {
      if (i.lane != row.lane || i.stream != row.stream) continue;
      for (int c = 0; c < columns; ++c) {
        const double a = std::max(i.start_ms, c * cell), b = std::min(i.end_ms, (c + 1) * cell);
        if (b > a) busy[static_cast<std::size_t>(c)] += b - a;
      }
    }
    std::string line;
    for (double b : busy) line += b >= 0.5 * cell ? '#' : b > 0 ? '+' : ' ';
    out += fmt::format("  {:<{}} |{}|\n", row.label(), label_width, line);
  }
  std::string axis(static_cast<std::size_t>(columns), ' ');
  if (trace.bound_ms) {
    const auto at = static_cast<std::size_t>(std::clamp(*trace.bound_ms / cell, 0.0, columns - 1.0));
    axis[at] = '^';
  }
  out += fmt::format("  {:<{}} |{}|\n", "", label_width, axis);
  out += fmt::format("  {:<{}}  0 ms{:>{}}\n", "", label_width, fmt::format("{:.2f} ms", span), columns - 3);
  const TraceStats stats = analyze(trace);
  out += "  busy:";
  for (const auto& l : stats.lanes) out += fmt::format(" {} {:.0f}%", to_string(l.lane), 100 * l.busy_fraction);
  out += fmt::format("; two or more engines at once {:.0f}% of the time", 100 * stats.overlap_fraction);
  if (stats.critical) out += fmt::format("; busiest: {}", to_string(*stats.critical));
  if (trace.bound_ms) out += fmt::format("; ^ bound {:.2f} ms", *trace.bound_ms);
  return out + "\n";
}

}  // namespace sluice
