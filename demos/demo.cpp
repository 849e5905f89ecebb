#include "demo.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "text_table.hpp"

namespace sluice::demo {

DemoResult make_result(std::string name, std::string question, std::vector<std::string> header) {
  DemoResult r;
  r.name = std::move(name);
  r.question = std::move(question);
  r.header = std::move(header);
  return r;
}

DemoResult skipped_result(std::string name, std::string question, std::string why) {
  DemoResult r = make_result(std::move(name), std::move(question), {});
  r.skipped = std::move(why);
  return r;
}

std::string fixed(double value, int decimals) { return fmt::format("{:.{}f}", value, decimals); }

std::size_t size_or(const DemoOptions& o, std::size_t fallback) { return o.size > 0 ? o.size : fallback; }
int repeats_or(const DemoOptions& o, int fallback) { return o.repeats > 0 ? o.repeats : fallback; }

std::string demo_text(const DemoResult& r) {
  std::string out = fmt::format("== {}: {}\n", r.name, r.question);
  if (!r.skipped.empty()) return out + "skipped: " + r.skipped + "\n";
  if (!r.header.empty()) {
    tools::TextTable table(r.header);
    for (const auto& row : r.rows) table.add_row(row);
    out += table.render();
  }
  out += fmt::format("verified: {} ({})\n", r.verified ? "yes" : "NO", r.verification);
  out += "=> " + r.conclusion + "\n";
  return out;
}

std::string demos_json(const std::vector<DemoResult>& results, int indent) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : r.rows) {
      nlohmann::json cells = nlohmann::json::object();
      for (std::size_t c = 0; c < row.size() && c < r.header.size(); ++c) cells[r.header[c]] = row[c];
      rows.push_back(cells);
    }
    all.push_back({{"name", r.name},
                   {"question", r.question},
                   {"rows", rows},
                   {"figures", r.figures},
                   {"verified", r.verified},
                   {"skipped", r.skipped},
                   {"verification", r.verification},
                   {"conclusion", r.conclusion}});
  }
  return all.dump(indent);
}

}  // namespace sluice::demo
