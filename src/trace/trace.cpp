#include "sluice/trace/trace.hpp"

#include <algorithm>
#include <utility>

namespace sluice {

namespace {
using Span = std::pair<double, double>;

// Sorted, merged busy stretches.
std::vector<Span> merged(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end());
  std::vector<Span> out;
  for (const auto& s : spans) {
    if (!out.empty() && s.first <= out.back().second)
      out.back().second = std::max(out.back().second, s.second);
    else
      out.push_back(s);
  }
  return out;
}

double total(const std::vector<Span>& spans) {
  double sum = 0;
  for (const auto& s : spans) sum += s.second - s.first;
  return sum;
}
}  // namespace

double Trace::span_ms() const {
  double end = wall_ms;
  for (const auto& i : intervals) end = std::max(end, i.end_ms);
  return end;
}

TraceStats analyze(const Trace& trace, double min_gap_ms) {
  TraceStats stats;
  stats.span_ms = trace.span_ms();
  std::vector<std::vector<Span>> busy_by_lane;
  for (Lane lane : {Lane::stage_in, Lane::h2d, Lane::compute, Lane::d2h, Lane::stage_out, Lane::peer}) {
    std::vector<Span> spans;
    for (const auto& i : trace.intervals)
      if (i.lane == lane && i.end_ms > i.start_ms) spans.emplace_back(i.start_ms, i.end_ms);
    if (spans.empty()) continue;
    const auto busy = merged(std::move(spans));
    LaneStats ls;
    ls.lane = lane;
    ls.busy_ms = total(busy);
    ls.busy_fraction = stats.span_ms > 0 ? ls.busy_ms / stats.span_ms : 0;
    for (std::size_t k = 1; k < busy.size(); ++k) {
      const double gap = busy[k].first - busy[k - 1].second;
      if (gap > min_gap_ms) {
        ++ls.gaps;
        ls.longest_gap_ms = std::max(ls.longest_gap_ms, gap);
      }
    }
    if (!stats.critical || ls.busy_ms > std::find_if(stats.lanes.begin(), stats.lanes.end(), [&](const LaneStats& l) {
                                          return l.lane == *stats.critical;
                                        })->busy_ms)
      stats.critical = lane;
    stats.lanes.push_back(ls);
    busy_by_lane.push_back(busy);
  }
  // Sweep: +1 where a lane's stretch starts, -1 where it ends.
  std::vector<std::pair<double, int>> edges;
  for (const auto& lane : busy_by_lane)
    for (const auto& s : lane) {
      edges.emplace_back(s.first, +1);
      edges.emplace_back(s.second, -1);
    }
  std::sort(edges.begin(), edges.end());
  int active = 0;
  double overlapped = 0, last = 0;
  for (const auto& [at, delta] : edges) {
    if (active >= 2) overlapped += at - last;
    active += delta;
    last = at;
  }
  stats.overlap_fraction = stats.span_ms > 0 ? overlapped / stats.span_ms : 0;
  return stats;
}

}  // namespace sluice
