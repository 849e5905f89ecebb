#include "trace_output.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "sluice/trace/trace_chrome.hpp"
#include "sluice/trace/trace_svg.hpp"
#include "sluice/trace/trace_terminal.hpp"

namespace sluice::cli {

namespace {
void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  std::fprintf(stderr, "wrote %s\n", path.c_str());
}
}  // namespace

void TraceOutput::check_writable() const {
  for (const auto& path : {chrome_json_path, svg_path}) {
    if (path.empty()) continue;
    std::ofstream probe(path, std::ios::binary | std::ios::app);
    if (!probe) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  }
}

void TraceOutput::add_options(CLI::App& command) {
  command.add_option("--trace", chrome_json_path, "write the recorded timelines as Chrome trace JSON (Perfetto)");
  command.add_option("--svg", svg_path, "write the recorded timelines as an SVG picture");
  command.add_flag("--timeline", terminal, "print the recorded timelines in the terminal");
}

void TraceOutput::write(const std::vector<Trace>& traces) const {
  if (!wanted()) return;
  if (traces.empty()) {
    std::fprintf(stderr, "sluice: nothing was recorded, so there is no timeline to write\n");
    return;
  }
  if (!chrome_json_path.empty()) write_file(chrome_json_path, chrome_trace_json(traces) + "\n");
  if (!svg_path.empty()) write_file(svg_path, timeline_svg(traces));
  if (terminal)
    for (const auto& t : traces) std::printf("%s\n", terminal_timeline(t).c_str());
}

}  // namespace sluice::cli
