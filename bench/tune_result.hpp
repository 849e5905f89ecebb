#pragma once
// What `sluice tune` measured, and how it is printed. Host-only.
#include <cstddef>
#include <string>
#include <vector>

#include "measured_row.hpp"
#include "sluice/measure/model.hpp"
#include "sluice/pipeline/pipeline_options.hpp"

namespace sluice::bench {

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
  bool replayed = false;  // replayed pipelines were swept: no model predictions
  // The defaults, and a second pipeline of the same defaults, from the final
  // rounds: how far apart two pipelines of one setting read in one call.
  workloads::MeasuredRow defaults, defaults_again;
  std::vector<TunePoint> sweep;     // the first pass, fastest first
  // The first pass's fastest few, measured again in rounds beside the
  // defaults (the fastest of many noisy medians is flattered by chance):
  // fastest first.
  std::vector<TunePoint> finalists;
  std::string model_label;       // the model's pick, measured in the sweep; empty for a replayed sweep
  double model_pick_ms = 0;
  // What the model was given (its options are each setting's): in the JSON,
  // so its predictions can be played again, and checked, with no GPU.
  ModelInput model_input;

  // The fastest setting: of the finalists, or of the sweep without them.
  const TunePoint& best() const { return finalists.empty() ? sweep.front() : finalists.front(); }
  bool all_verified() const;
};

// How far the model's predictions for a case's sweep are from its measured times.
struct ModelErrors {
  double median_abs = 0;  // median of |predicted / measured - 1|
  double worst = 0;       // the largest of them, signed
  std::size_t within_10_percent = 0;
  std::size_t count = 0;
};
ModelErrors model_errors(const TuneCase& c);

std::string tune_text(const std::vector<TuneCase>& cases);
std::string tune_json(const std::vector<TuneCase>& cases, int indent = 2);

}  // namespace sluice::bench
