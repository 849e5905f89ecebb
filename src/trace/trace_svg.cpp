#include "sluice/trace/trace_svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "trace_rows.hpp"

namespace sluice {

namespace {

constexpr int left = 150, right = 30, row_height = 20, row_gap = 4, title_height = 24, axis_height = 38,
              block_gap = 14, legend_height = 30;

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

const char* color(Lane lane) {
  switch (lane) {
    case Lane::stage_in: return "#8c6bb1";
    case Lane::h2d: return "#1f77b4";
    case Lane::compute: return "#2ca02c";
    case Lane::d2h: return "#ff7f0e";
    case Lane::stage_out: return "#b15928";
    case Lane::peer: return "#d62728";
  }
  return "#777777";
}

// 1, 2 or 5 times a power of ten, giving about eight ticks.
double tick_step(double span) {
  if (span <= 0) return 1;
  const double raw = span / 8;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

std::string trim_number(double v) {
  std::string s = fmt::format("{:.3f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::string timeline_svg(std::span<const Trace> traces, const SvgOptions& options) {
  double span = 0;
  for (const auto& t : traces) span = std::max(span, t.span_ms());
  if (span <= 0) span = 1;
  const double plot = options.width - left - right;
  const double scale = plot / span;
  auto x_of = [&](double ms) { return left + ms * scale; };

  int height = 10 + legend_height;
  for (const auto& t : traces)
    height += title_height + static_cast<int>(detail::timeline_rows(t).size()) * (row_height + row_gap) + axis_height +
              block_gap;

  std::string body;
  std::vector<Lane> lanes_seen;
  int y = 10;
  const double step = tick_step(span);
  for (const auto& t : traces) {
    std::string heading = t.title;
    if (t.wall_ms > 0) heading += fmt::format(" - {:.2f} ms", t.wall_ms);
    if (t.bound_ms && t.wall_ms > 0)
      heading += fmt::format(", bound {:.2f} ms, efficiency {:.3f}", *t.bound_ms, *t.bound_ms / t.wall_ms);
    body += fmt::format("<text x=\"{}\" y=\"{}\" class=\"title\">{}</text>\n", left, y + 16, escape(heading));
    const int rows_top = y + title_height;
    const auto rows = detail::timeline_rows(t);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const int ry = rows_top + static_cast<int>(r) * (row_height + row_gap);
      body += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" class=\"lane\"/>\n", left, ry, plot,
                          row_height);
      body += fmt::format("<text x=\"{}\" y=\"{}\" class=\"label\">{}</text>\n", left - 8, ry + 14,
                          escape(rows[r].label()));
      if (std::find(lanes_seen.begin(), lanes_seen.end(), rows[r].lane) == lanes_seen.end())
        lanes_seen.push_back(rows[r].lane);
    }
    for (const auto& i : t.intervals) {
      const int ry = rows_top + static_cast<int>(detail::row_of(rows, i)) * (row_height + row_gap);
      const double x = x_of(i.start_ms);
      const double w = std::max(0.6, i.duration_ms() * scale);
      // Alternate shades so neighbouring chunks stay apart.
      body += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" fill-opacity=\"{}\"><title>chunk {}: "
          "{:.3f}-{:.3f} ms</title></rect>\n",
          x, ry + 1, w, row_height - 2, color(i.lane), i.chunk % 2 == 0 ? "1" : "0.7", i.chunk, i.start_ms, i.end_ms);
      if (w >= 18)
        body += fmt::format("<text x=\"{:.2f}\" y=\"{}\" class=\"chunk\">{}</text>\n", x + w / 2, ry + 14, i.chunk);
    }
    const int rows_bottom = rows_top + static_cast<int>(rows.size()) * (row_height + row_gap);
    body += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" class=\"axis\"/>\n", left, rows_bottom,
                        left + plot, rows_bottom);
    for (double tick = 0; tick <= span + step * 1e-9; tick += step)
      body += fmt::format(
          "<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" class=\"axis\"/><text x=\"{0:.2f}\" y=\"{3}\" "
          "class=\"tick\">{4} ms</text>\n",
          x_of(tick), rows_bottom, rows_bottom + 4, rows_bottom + 16, trim_number(tick));
    if (t.bound_ms) {
      const double bx = x_of(*t.bound_ms);
      body += fmt::format(
          "<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" class=\"bound\"/><text x=\"{0:.2f}\" y=\"{3}\" "
          "class=\"boundlabel\">bound {4:.2f} ms</text>\n",
          bx, rows_top - 2, rows_bottom + 4, rows_bottom + 29, *t.bound_ms);
    }
    y = rows_bottom + axis_height + block_gap;
  }
  std::sort(lanes_seen.begin(), lanes_seen.end());
  int lx = left;
  for (Lane lane : lanes_seen) {
    body += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\" "
                        "class=\"legend\">{}</text>\n",
                        lx, y, color(lane), lx + 16, y + 10, to_string(lane));
    lx += 130;
  }
  body += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"bound\"/><text x=\"{}\" y=\"{}\" "
                      "class=\"legend\">bound (slowest engine alone)</text>\n",
                      lx, y + 6, lx + 14, y + 6, lx + 18, y + 10);

  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\">\n"
      "<style>.title{{font-size:13px;font-weight:bold}} .label{{font-size:11px;text-anchor:end}} "
      ".lane{{fill:#f3f3f3}} .chunk{{font-size:9px;fill:#fff;text-anchor:middle}} "
      ".axis{{stroke:#555;stroke-width:1}} .tick{{font-size:10px;text-anchor:middle;fill:#333}} "
      ".bound{{stroke:#d62728;stroke-width:1.5;stroke-dasharray:5,3}} "
      ".boundlabel{{font-size:10px;fill:#d62728;text-anchor:middle}} .legend{{font-size:11px}}</style>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n{2}</svg>\n",
      options.width, height, body);
}

}  // namespace sluice
