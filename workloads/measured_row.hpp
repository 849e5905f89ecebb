#pragma once
// One measured row of a comparison: who ran it, every timed run, the median
// with its spread, and what it is judged by. Host-only, so the report and
// the targets built on it are tested without a GPU.
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sluice/measure/model.hpp"
#include "sluice/measure/stats.hpp"
#include "sluice/pipeline/run_report.hpp"

namespace sluice::workloads {

// Who wrote what a row runs: the targets compare rows by kind, not by name.
enum class RowKind {
  hand_written,     // stream code people write by hand (synchronous, staircase, triple buffer, read() loops)
  pytorch,          // PyTorch as a careful user writes it
  sluice,           // a sluice pipeline, run() by run()
  sluice_replayed,  // a sluice pipeline captured once as a CUDA graph and replayed
};
inline const char* to_string(RowKind kind) {
  switch (kind) {
    case RowKind::hand_written: return "hand-written";
    case RowKind::pytorch: return "pytorch";
    case RowKind::sluice: return "sluice";
    case RowKind::sluice_replayed: return "sluice replayed";
  }
  return "?";
}

struct MeasuredRow {
  std::string workload;
  std::size_t bytes = 0;  // per array
  std::string method;
  RowKind kind = RowKind::hand_written;
  std::string memory;      // "pinned", "pageable", "registered", "file", ...
  std::vector<double> samples;  // ms of every timed run, in the order they ran
  Summary ms;              // of the samples
  double gbps = 0;         // bytes in + out over the median time
  double speedup = 0;      // synchronous (pinned) median over this median
  double bound_ms = 0;     // the absolute bound this row is judged by
  std::string bound_term;  // the engine that sets it
  double efficiency = 0;   // bound over this median
  std::optional<double> model_ms;  // the model's prediction, for sluice rows
  std::optional<ModelInput> model_input;  // what it was made from
  // The fixed costs of a run (from the call to the first copy, from the last
  // copy to the return, host time per chunk), medians of runs with their
  // stages timed, apart from the timed runs above; unset where not measured.
  std::optional<RunReport::Overhead> overhead;
  bool verified = false;
  std::string detail;      // why verification failed
  // Non-empty: the row could not be measured in this build or on this
  // machine, and says why; it is printed as not available, never as a time.
  std::string unavailable;

  bool sluice() const { return kind == RowKind::sluice || kind == RowKind::sluice_replayed; }
  bool measured() const { return unavailable.empty() && ms.count > 0; }
};

// A row that was not measured: its place in the table, and why.
inline MeasuredRow unavailable_row(std::string workload, std::size_t bytes, std::string method, RowKind kind,
                                   std::string memory, std::string why) {
  MeasuredRow row;
  row.workload = std::move(workload);
  row.bytes = bytes;
  row.method = std::move(method);
  row.kind = kind;
  row.memory = std::move(memory);
  row.unavailable = std::move(why);
  return row;
}

}  // namespace sluice::workloads
