// Every row judged by one bound per case: the rates are the machine's, so
// each case's bound is computed with the best each engine showed anywhere in
// the call (settle_bounds), and the model predicts sluice's rows from them.
#include <algorithm>

#include "bench.hpp"
#include "bound/link_rates.hpp"
#include "sluice/measure/tuner.hpp"

namespace sluice::bench {

using workloads::Problem;

namespace {

// A prediction wants the staging rate a run sees, not the host at its best.
EngineRates model_rates(const BenchCase& c, bool staged) {
  return staged ? staging_beside_copies(c.bound.staged_volume, c.bound.rates) : c.bound.rates;
}

}  // namespace

ModelInput detail::model_input(const BenchResult& result, const BenchCase& c, const Problem& problem,
                               const PipelineOptions& options, bool staged) {
  ModelInput in;
  in.rates = model_rates(c, staged);
  in.fixed = result.fixed;
  in.kernel.ms_per_item = c.bound.kernel_ms / static_cast<double>(std::max<std::size_t>(problem.items(), 1));
  in.spans = array_spans(static_cast<unsigned>(problem.workload().input_count()), 1, sizeof(float), staged);
  in.items = problem.items();
  in.options = options;
  return in;
}

void detail::settle_bounds(BenchResult& result) {
  LinkRates best_link = result.link;
  EngineRates best;
  auto keep_faster = [](double& best_gbps, double gbps) { best_gbps = std::max(best_gbps, gbps); };
  for (const auto& c : result.cases) {
    const EngineRates& r = c.bound.rates;
    best_link = fastest_of(best_link, {r.h2d_gbps, r.d2h_gbps, r.both_gbps, r.h2d_heavy, r.d2h_heavy});
    keep_faster(best.stage_in_gbps, r.stage_in_gbps);
    keep_faster(best.stage_out_gbps, r.stage_out_gbps);
    keep_faster(best.stage_both_gbps, r.stage_both_gbps);
    keep_faster(best.staging_beside_link.stage_gbps, r.staging_beside_link.stage_gbps);
    keep_faster(best.staging_beside_link.link_gbps, r.staging_beside_link.link_gbps);
    keep_faster(best.read_gbps, r.read_gbps);
    keep_faster(best.write_gbps, r.write_gbps);
  }
  best = with_link(best, best_link);
  result.link = best_link;
  result.host_best = {best.stage_in_gbps, best.stage_out_gbps, best.stage_both_gbps, result.host.threads};
  result.staging_beside_link = best.staging_beside_link;
  for (auto& c : result.cases) c.bound.recompute(best);
  for (auto& row : result.rows) {
    const auto c = std::find_if(result.cases.begin(), result.cases.end(), [&](const BenchCase& k) {
      return k.workload == row.workload && k.bytes == row.bytes;
    });
    if (c == result.cases.end() || !row.measured()) continue;
    const Bound& bound = row.memory == "pageable" && c->bound.staged.ms > 0 ? c->bound.staged : c->bound.pinned;
    row.bound_ms = bound.ms;
    row.bound_term = bound.limiter;
    row.efficiency = efficiency(bound.ms, row.ms.median);
    if (row.model_input) {
      const bool staged = std::any_of(row.model_input->spans.begin(), row.model_input->spans.end(),
                                      [](const SpanShape& span) { return span.host_pass(); });
      row.model_input->rates = model_rates(*c, staged);
      row.model_ms = predict(*row.model_input).ms;
    }
  }
}

}  // namespace sluice::bench
