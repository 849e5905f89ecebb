#pragma once
// The rows a timeline draws: one per (GPU, lane, stream) that appears, GPU by
// GPU, in lane order. Shared by the timeline writers.
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "sluice/trace/trace.hpp"

namespace sluice::detail {

struct TimelineRow {
  int device;  // -1 when the trace does not name GPUs
  Lane lane;
  int stream;
  std::string label() const {
    std::string text = device >= 0 ? "GPU" + std::to_string(device) + " " : std::string();
    text.append(to_string(lane));
    if (stream > 0) text.append(1, ' ').append(std::to_string(stream));
    return text;
  }
  friend bool operator==(const TimelineRow&, const TimelineRow&) = default;
};

inline std::vector<TimelineRow> timeline_rows(const Trace& trace) {
  std::vector<std::tuple<int, int, int>> keys;
  for (const auto& i : trace.intervals) keys.emplace_back(i.device, static_cast<int>(i.lane), i.stream);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<TimelineRow> rows;
  for (const auto& [device, lane, stream] : keys) rows.push_back({device, static_cast<Lane>(lane), stream});
  return rows;
}

inline std::size_t row_of(const std::vector<TimelineRow>& rows, const StageInterval& i) {
  return static_cast<std::size_t>(
      std::find(rows.begin(), rows.end(), TimelineRow{i.device, i.lane, i.stream}) - rows.begin());
}

}  // namespace sluice::detail
