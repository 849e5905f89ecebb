#pragma once
// What every demo returns: the question it answers, a table of measured
// numbers, whether its result was verified, and a conclusion drawn from the
// numbers (never a canned sentence).
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sluice/trace/trace.hpp"

namespace sluice::demo {

struct DemoOptions {
  int device = 0;
  std::size_t size = 0;  // bytes; 0 picks the demo's own default
  int repeats = 0;       // 0 picks the demo's own default
};

struct DemoResult {
  std::string name;
  std::string question;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::map<std::string, double> figures;  // the key numbers, for --json
  bool verified = false;
  std::string skipped;  // why the demo could not run here (too few GPUs, no NCCL); empty when it ran
  std::string verification;  // what was checked, or what failed
  std::string conclusion;
  std::vector<Trace> traces;  // timelines of the runs compared, where the demo records them
};

struct DemoInfo {
  std::string name;
  std::string question;
  std::function<DemoResult(const DemoOptions&)> run;
};

// Every demo, in the order `sluice demo` runs them.
const std::vector<DemoInfo>& all_demos();

std::string demo_text(const DemoResult& result);
std::string demos_json(const std::vector<DemoResult>& results, int indent = 2);

// Helpers the demos share.
DemoResult make_result(std::string name, std::string question, std::vector<std::string> header);
DemoResult skipped_result(std::string name, std::string question, std::string why);
std::string fixed(double value, int decimals);
std::size_t size_or(const DemoOptions& options, std::size_t fallback);
int repeats_or(const DemoOptions& options, int fallback);

}  // namespace sluice::demo
