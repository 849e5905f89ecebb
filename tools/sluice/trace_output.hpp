#pragma once
// --trace FILE, --svg FILE and --timeline, shared by the commands that record runs.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "sluice/trace/trace.hpp"

namespace sluice::cli {

struct TraceOutput {
  std::string chrome_json_path;
  std::string svg_path;
  bool terminal = false;

  bool wanted() const { return !chrome_json_path.empty() || !svg_path.empty() || terminal; }
  void add_options(CLI::App& command);
  // Before any work: makes sure the files can be written, so a bad path is
  // not found out after a long run. Throws std::runtime_error naming the file.
  void check_writable() const;
  // Writes what was asked for; throws std::runtime_error naming a file that cannot be written.
  void write(const std::vector<Trace>& traces) const;
};

}  // namespace sluice::cli
