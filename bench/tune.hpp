#pragma once
// `sluice tune`: the pipeline's defaults against a measured sweep of chunk
// sizes, ramps and depths, with the model's pick beside them, every run
// verified. Shows the gap between the defaults and the best setting.
#include <functional>
#include <string>
#include <vector>

#include "measure.hpp"
#include "sluice/pipeline_options.hpp"
#include "workload.hpp"

namespace sluice::bench {

struct TuneOptions {
  int device = 0;
  std::vector<workloads::Workload> workloads;
  std::vector<std::size_t> sizes;
  int repeats = 3;
  bool pageable = false;  // sweep pageable (staged) spans instead of pinned
};

struct TunePoint {
  PipelineOptions options;
  std::string label;  // "16 MiB chunks, ramp from 1 MiB, depth 4"
  workloads::MeasuredRow row;
  double model_ms = 0;  // the model's prediction for this setting
};

struct TuneCase {
  std::string workload;
  std::size_t bytes = 0;
  double bound_ms = 0;
  std::string bound_term;
  workloads::MeasuredRow defaults;  // from the final rounds
  std::vector<TunePoint> sweep;     // the first pass, fastest first
  // The defaults and the first pass's fastest few, measured again in rounds
  // (the fastest of many noisy medians is flattered by chance): fastest first.
  std::vector<TunePoint> finalists;
  std::string model_label;       // the model's pick, measured in the sweep
  double model_pick_ms = 0;
};

// How far the model's predictions for a case's sweep are from its measured times.
struct ModelErrors {
  double median_abs = 0;  // median of |predicted / measured - 1|
  double worst = 0;       // the largest of them, signed
  std::size_t within_10_percent = 0;
  std::size_t count = 0;
};
ModelErrors model_errors(const TuneCase& c);

std::vector<TuneCase> run_tune(const TuneOptions& options, const std::function<void(const std::string&)>& progress);
std::string tune_text(const std::vector<TuneCase>& cases);

}  // namespace sluice::bench
