#include "sluice/trace/trace_chrome.hpp"

#include <nlohmann/json.hpp>

#include "trace_rows.hpp"

namespace sluice {

std::string chrome_trace_json(std::span<const Trace> traces, int indent) {
  nlohmann::json events = nlohmann::json::array();
  int pid = 0;
  for (const auto& trace : traces) {
    ++pid;
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", trace.title}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
    const auto rows = detail::timeline_rows(trace);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const int tid = static_cast<int>(r) + 1;
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", rows[r].label()}}}});
      events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
    }
    for (const auto& i : trace.intervals) {
      const int tid = static_cast<int>(detail::row_of(rows, i)) + 1;
      nlohmann::json args{{"chunk", i.chunk}};
      if (i.bytes > 0) args["bytes"] = i.bytes;
      events.push_back({{"name", "chunk " + std::to_string(i.chunk)},
                        {"cat", std::string(to_string(i.lane))},
                        {"ph", "X"},
                        {"ts", i.start_ms * 1000.0},  // microseconds
                        {"dur", i.duration_ms() * 1000.0},
                        {"pid", pid},
                        {"tid", tid},
                        {"args", args}});
    }
    if (trace.bound_ms)
      events.push_back({{"name", "bound"}, {"ph", "i"}, {"s", "p"}, {"ts", *trace.bound_ms * 1000.0}, {"pid", pid},
                        {"tid", 0}, {"args", {{"bound_ms", *trace.bound_ms}, {"wall_ms", trace.wall_ms}}}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump(indent);
}

}  // namespace sluice
