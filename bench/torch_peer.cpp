// PyTorch's rows: bench/torch_peer.py, run once for every case in the same
// process tree as the rest of the bench, its JSON read back into rows with
// every timed run, so their spread is worked out as the bench's own.
#include <fmt/format.h>

#include "bench.hpp"
#include "python_peer.hpp"

namespace sluice::bench::detail {

std::vector<MeasuredRow> torch_rows(const BenchOptions& o, std::string& note) {
  std::string workloads, sizes;
  for (const auto& w : o.workloads) workloads += fmt::format("{}{}", workloads.empty() ? "" : ",", w.name());
  for (std::size_t b : o.sizes) sizes += fmt::format("{}{}", sizes.empty() ? "" : ",", b);
  const auto j = run_python_peer("PyTorch peer", fmt::format("{} {} --workloads {} --sizes {} --repeat {} --device {}",
                                                            o.python, o.torch_peer, workloads, sizes, o.repeats, o.device),
                                  note);
  if (j.is_null()) return {};
  std::vector<MeasuredRow> rows;
  try {
    for (const auto& r : j.at("rows")) {
      MeasuredRow row;
      row.workload = r.at("workload").get<std::string>();
      row.bytes = r.at("bytes").get<std::size_t>();
      row.method = "PyTorch, " + r.at("method").get<std::string>();
      row.kind = RowKind::pytorch;
      row.memory = r.at("memory").get<std::string>();
      row.samples = r.at("samples_ms").get<std::vector<double>>();
      row.ms = summarize(row.samples);
      row.gbps = r.at("gbps").get<double>();
      row.verified = r.at("verified").get<bool>();
      row.detail = r.value("detail", "");
      rows.push_back(std::move(row));
    }
  } catch (const std::exception& e) {  // a malformed row, or one with no timed runs
    note = std::string("PyTorch peer's output could not be read: ") + e.what();
    return {};
  }
  return rows;
}

}  // namespace sluice::bench::detail
