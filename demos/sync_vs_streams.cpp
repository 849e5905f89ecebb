// The classic: one stream doing cudaMemcpy -> kernel -> cudaMemcpy, against
// the data split over N streams (the "staircase"), and sluice's pipeline,
// for a compute-heavy kernel and for vector add, with the bound beside them.
#include <fmt/format.h>

#include "absolute_bound.hpp"
#include "demo.hpp"
#include "measure.hpp"
#include "peers.hpp"

namespace sluice::demo {

DemoResult run_sync_vs_streams(const DemoOptions& o) {
  const std::size_t items = size_or(o, std::size_t{256} << 20) / sizeof(float);
  const int repeats = repeats_or(o, 3);
  DemoResult r = make_result("sync-vs-streams", "what do streams buy over one synchronous stream?",
                             {"workload", "method", "ms", "GB/s", "vs sync", "of bound", "verified"});
  r.verified = true;
  for (const char* name : {"sincos100", "vadd"}) {
    workloads::Problem problem(workloads::parse_workload(name), items, workloads::Problem::Memory::pinned);
    const Bound bound = workloads::absolute_bound(problem, o.device, repeats, nullptr).pinned;
    Pipeline pipeline = workloads::make_pipeline(problem, {});

    std::vector<workloads::MeasuredRow> rows;
    auto sync = workloads::make_synchronous(problem);
    rows.push_back(workloads::measure_row("1 stream, synchronous", problem, false, repeats, [&] { sync->run(problem); }));
    for (unsigned n : {2u, 4u, 8u}) {
      auto staircase = workloads::make_staircase(problem, n);
      rows.push_back(workloads::measure_row(fmt::format("{} streams, staircase", n), problem, false, repeats,
                                            [&] { staircase->run(problem); }));
    }
    rows.push_back(workloads::measure_row("sluice pipeline", problem, true, repeats, [&] { pipeline.run(); }));
    const double sync_ms = rows.front().ms.median;
    for (const auto& row : rows) {
      r.rows.push_back({name, row.method, fixed(row.ms.median, 2), fixed(row.gbps, 1),
                        fixed(sync_ms / row.ms.median, 2) + "x", fixed(bound.ms / row.ms.median, 3),
                        row.verified ? "yes" : "NO"});
      r.verified &= row.verified;
    }
    r.rows.push_back({name, "bound (" + bound.limiter + ")", fixed(bound.ms, 2), "", "", "1.000", ""});
    if (std::string(name) == "sincos100") {  // the timelines: one bar per lane, the staircase, the pipeline
      r.traces.push_back(workloads::traced_run("1 stream, synchronous", problem, bound.ms,
                                               [&](TraceRecorder* rec) { sync->run(problem, rec); }));
      auto four_streams = workloads::make_staircase(problem, 4);
      r.traces.push_back(workloads::traced_run("4 streams, staircase", problem, bound.ms,
                                               [&](TraceRecorder* rec) { four_streams->run(problem, rec); }));
      r.traces.push_back(workloads::traced_pipeline("sluice pipeline", problem, {}, bound.ms));
    }
    const auto& four = rows[2];
    const auto& sluice_row = rows.back();
    r.figures[std::string(name) + " speedup 4 streams"] = sync_ms / four.ms.median;
    r.figures[std::string(name) + " speedup pipeline"] = sync_ms / sluice_row.ms.median;
    r.conclusion += fmt::format("{}{}: 4 streams ran {:.2f}x the synchronous speed, the pipeline {:.2f}x at {:.2f} of "
                                "the bound, which is set by {}",
                                r.conclusion.empty() ? "" : "; ", name, sync_ms / four.ms.median,
                                sync_ms / sluice_row.ms.median, bound.ms / sluice_row.ms.median, bound.limiter);
  }
  r.verification = "every run's output poisoned first, then compared with a CPU reference";
  return r;
}

}  // namespace sluice::demo
