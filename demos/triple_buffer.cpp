// Three streams - H2D, compute, D2H - over a ring of three device slots,
// joined by cudaEventRecord / cudaStreamWaitEvent. With three streams it keeps
// every engine busy; the staircase needs many more streams to get as close.
#include <fmt/format.h>

#include "absolute_bound.hpp"
#include "demo.hpp"
#include "measure.hpp"
#include "peers.hpp"
#include "pipeline/schedule/chunking.hpp"

namespace sluice::demo {

DemoResult run_triple_buffer(const DemoOptions& o) {
  const std::size_t items = size_or(o, std::size_t{256} << 20) / sizeof(float);
  const int repeats = repeats_or(o, 3);
  DemoResult r = make_result("triple-buffer", "can three streams and events reach the bound?",
                             {"workload", "method", "streams", "ms", "of bound", "verified"});
  r.verified = true;
  for (const char* name : {"sincos20", "copy"}) {
    workloads::Problem problem(workloads::parse_workload(name), items, workloads::Problem::Memory::pinned);
    const Bound bound = workloads::absolute_bound(problem, o.device, repeats, nullptr).pinned;
    Pipeline pipeline = workloads::make_pipeline(problem, {});
    auto staircase3 = workloads::make_staircase(problem, 3);
    auto staircase16 = workloads::make_staircase(problem, 16);
    auto triple = workloads::make_triple_buffer(problem, default_chunking(items, sizeof(float)).chunk_items);
    struct Entry {
      workloads::MeasuredRow row;
      int streams;
    };
    std::vector<Entry> entries{
        {workloads::measure_row("staircase", problem, false, repeats, [&] { staircase3->run(problem); }), 3},
        {workloads::measure_row("staircase", problem, false, repeats, [&] { staircase16->run(problem); }), 16},
        {workloads::measure_row("triple buffer + events", problem, false, repeats, [&] { triple->run(problem); }), 3},
        {workloads::measure_row("sluice pipeline", problem, true, repeats, [&] { pipeline.run(); }), 3}};
    for (const auto& e : entries) {
      r.rows.push_back({name, e.row.method, std::to_string(e.streams), fixed(e.row.ms.median, 2),
                        fixed(bound.ms / e.row.ms.median, 3), e.row.verified ? "yes" : "NO"});
      r.verified &= e.row.verified;
    }
    r.rows.push_back({name, "bound (" + bound.limiter + ")", "", fixed(bound.ms, 2), "1.000", ""});
    if (std::string(name) == "copy") {
      r.traces.push_back(workloads::traced_run("copy: staircase, 3 streams", problem, bound.ms,
                                               [&](TraceRecorder* rec) { staircase3->run(problem, rec); }));
      r.traces.push_back(workloads::traced_run("copy: triple buffer, 3 streams + events", problem, bound.ms,
                                               [&](TraceRecorder* rec) { triple->run(problem, rec); }));
    }
    const double triple_eff = bound.ms / entries[2].row.ms.median;
    const double stair3_eff = bound.ms / entries[0].row.ms.median;
    const double stair16_eff = bound.ms / entries[1].row.ms.median;
    r.figures[std::string(name) + " triple buffer of bound"] = triple_eff;
    r.figures[std::string(name) + " staircase 3 of bound"] = stair3_eff;
    r.conclusion += fmt::format("{}{}: with 3 streams the triple buffer reached {:.2f} of the bound and the staircase "
                                "{:.2f}; the staircase needed 16 streams for {:.2f}",
                                r.conclusion.empty() ? "" : "; ", name, triple_eff, stair3_eff, stair16_eff);
  }
  r.verification = "every run's output poisoned first, then compared with a CPU reference";
  return r;
}

}  // namespace sluice::demo
