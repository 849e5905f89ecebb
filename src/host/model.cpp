#include "sluice/model.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>

namespace sluice {

namespace {

// The five engines of a run, and the tasks each runs in chunk order.
enum Engine { stage_in, h2d, compute, d2h, stage_out, engines };
constexpr std::array<Lane, engines> lane_of{Lane::stage_in, Lane::h2d, Lane::compute, Lane::d2h, Lane::stage_out};

struct Task {
  double work = 0;      // bytes for copies, ms for compute
  double latency = 0;   // ms before the work starts moving, once ready
  double ready = -1;    // when its dependencies were met; -1 while they are not
  double start = -1, end = -1;
  double left = 0;      // work not done yet
  bool present = false;  // this engine has a task for this chunk
};

constexpr double never = std::numeric_limits<double>::infinity();

}  // namespace

LatencyRate fit_latency_rate(double small_bytes, double small_ms, double large_bytes, double large_ms) {
  if (large_bytes <= small_bytes || large_ms <= 0) throw std::invalid_argument("fit_latency_rate: need two sizes, larger second");
  const double ms_per_byte = std::max(1e-15, (large_ms - small_ms) / (large_bytes - small_bytes));
  return {std::max(0.0, small_ms - small_bytes * ms_per_byte), 1.0 / (ms_per_byte * 1e6)};
}

EngineRates staging_beside_copies(const RunVolume& volume, const EngineRates& rates) {
  const double alone_ms = staging_ms(volume, rates), shared_ms = host_memory_ms(volume, rates);
  if (alone_ms <= 0 || shared_ms <= alone_ms) return rates;
  const double slower = alone_ms / shared_ms;
  EngineRates seen = rates;
  seen.stage_in_gbps *= slower;
  seen.stage_out_gbps *= slower;
  seen.stage_both_gbps *= slower;
  return seen;
}

Prediction predict(const ModelInput& in) {
  const std::size_t n = in.plan.chunk_count();
  Prediction out;
  if (n == 0) {
    out.ms = in.fixed.run_ms;
    return out;
  }
  const EngineRates& r = in.rates;
  if ((in.in_item_bytes > 0 && r.h2d_gbps <= 0) || (in.out_item_bytes > 0 && r.d2h_gbps <= 0))
    throw std::invalid_argument("model: the link rates must be known");
  if ((in.staged_in && r.stage_in_gbps <= 0) || (in.staged_out && r.stage_out_gbps <= 0))
    throw std::invalid_argument("model: the host staging rates must be known");
  if (in.depth == 0 || in.in_slots == 0 || in.out_slots == 0) throw std::invalid_argument("model: slots must be at least 1");

  std::vector<std::array<Task, engines>> tasks(n);
  for (std::size_t c = 0; c < n; ++c) {
    const double items = static_cast<double>(in.plan.chunk(c).size());
    auto& t = tasks[c];
    t[stage_in] = {items * static_cast<double>(in.in_item_bytes), 0, -1, -1, -1, 0, in.staged_in && in.in_item_bytes > 0};
    t[h2d] = {items * static_cast<double>(in.in_item_bytes), in.fixed.copy_ms, -1, -1, -1, 0, in.in_item_bytes > 0};
    t[compute] = {in.kernel.fixed_ms + items * in.kernel.ms_per_item, in.fixed.launch_ms, -1, -1, -1, 0, true};
    t[d2h] = {items * static_cast<double>(in.out_item_bytes), in.fixed.copy_ms, -1, -1, -1, 0, in.out_item_bytes > 0};
    t[stage_out] = {items * static_cast<double>(in.out_item_bytes), in.fixed.wake_ms, -1, -1, -1, 0,
                    in.staged_out && in.out_item_bytes > 0};
    for (auto& task : t) task.left = task.work;
  }
  // The end of a task, or of its absent stand-in: an absent stage is done as soon as it could start.
  auto done_at = [&](std::size_t c, int e) -> double {
    const Task& t = tasks[c][e];
    return t.end;
  };

  std::array<std::size_t, engines> next{};  // the chunk each engine works on next, in order
  double now = 0;
  // When chunk c's task on engine e may start: its dependencies and its engine's order.
  auto dependencies_met = [&](std::size_t c, int e) -> double {
    double at = 0;
    auto after = [&](double t) { at = t < 0 || at < 0 ? -1 : std::max(at, t); };
    if (c > 0) after(done_at(c - 1, e));  // in order on its engine
    switch (e) {
      case stage_in:
        after(in.fixed.chunk_ms * static_cast<double>(c));
        if (c >= in.in_slots) after(done_at(c - in.in_slots, h2d));  // its pinned slot is read by that H2D
        break;
      case h2d:
        after(in.fixed.chunk_ms * static_cast<double>(c + 1));
        after(done_at(c, stage_in));
        if (c >= in.depth) after(done_at(c - in.depth, d2h));  // its device slot
        if (c >= in.out_slots && in.staged_out) after(done_at(c - in.out_slots, stage_out));  // the driver's run-ahead
        break;
      case compute: after(done_at(c, h2d)); break;
      case d2h: after(done_at(c, compute)); break;
      case stage_out: after(done_at(c, d2h)); break;
      default: break;
    }
    return at;
  };

  for (int guard = 0; guard < 100 * static_cast<int>(n) * engines + 1000; ++guard) {
    // Settle absent tasks and mark ready times.
    bool changed = true;
    while (changed) {
      changed = false;
      for (int e = 0; e < engines; ++e) {
        const std::size_t c = next[e];
        if (c >= n) continue;
        Task& t = tasks[c][e];
        if (t.ready < 0) {
          const double at = dependencies_met(c, e);
          if (at >= 0) {
            t.ready = at;
            if (!t.present) {
              t.start = t.end = at;
              ++next[e];
              changed = true;
            }
          }
        }
      }
    }
    // Running tasks: ready, latency passed.
    std::array<bool, engines> running{};
    bool any_left = false;
    double next_event = never;
    for (int e = 0; e < engines; ++e) {
      const std::size_t c = next[e];
      if (c >= n) continue;
      any_left = true;
      Task& t = tasks[c][e];
      if (t.ready < 0) continue;
      const double go = t.ready + t.latency;
      if (go > now + 1e-12) {
        next_event = std::min(next_event, go);
        continue;
      }
      if (t.start < 0) t.start = go;
      running[e] = true;
    }
    if (!any_left) break;
    // Rates of what runs now.
    std::array<double, engines> rate{};  // work per ms
    const bool both_link = running[h2d] && running[d2h];
    const bool both_host = running[stage_in] && running[stage_out];
    if (running[h2d]) rate[h2d] = (both_link && r.both_gbps > 0 ? std::min(r.h2d_gbps, r.both_gbps / 2) : r.h2d_gbps) * 1e6;
    if (running[d2h]) rate[d2h] = (both_link && r.both_gbps > 0 ? std::min(r.d2h_gbps, r.both_gbps / 2) : r.d2h_gbps) * 1e6;
    if (running[stage_in])
      rate[stage_in] = (both_host && r.stage_both_gbps > 0 ? std::min(r.stage_in_gbps, r.stage_both_gbps / 2) : r.stage_in_gbps) * 1e6;
    if (running[stage_out])
      rate[stage_out] =
          (both_host && r.stage_both_gbps > 0 ? std::min(r.stage_out_gbps, r.stage_both_gbps / 2) : r.stage_out_gbps) * 1e6;
    if (running[compute]) rate[compute] = 1.0;  // ms of kernel per ms
    for (int e = 0; e < engines; ++e)
      if (running[e]) {
        const Task& t = tasks[next[e]][e];
        next_event = std::min(next_event, rate[e] > 0 ? now + t.left / rate[e] : now);
      }
    if (next_event == never) throw std::logic_error("model: no task can run (a dependency cycle)");
    const double step = next_event - now;
    for (int e = 0; e < engines; ++e) {
      if (!running[e]) continue;
      Task& t = tasks[next[e]][e];
      t.left -= rate[e] * step;
      if (t.left <= 1e-9 * std::max(1.0, t.work)) {
        t.left = 0;
        t.end = next_event;
        ++next[e];
      }
    }
    now = next_event;
  }

  double end = 0;
  std::array<double, engines> busy{};
  for (std::size_t c = 0; c < n; ++c)
    for (int e = 0; e < engines; ++e) {
      const Task& t = tasks[c][e];
      end = std::max(end, t.end);
      if (!t.present) continue;
      busy[e] += t.end - t.start;
      out.timeline.push_back({lane_of[e], c, t.start, t.end, static_cast<std::size_t>(e == compute ? 0 : t.work), 0});
    }
  out.ms = end + in.fixed.run_ms;
  const auto busiest = std::max_element(busy.begin(), busy.end()) - busy.begin();
  out.busiest = std::string(to_string(lane_of[static_cast<std::size_t>(busiest)]));
  return out;
}

}  // namespace sluice
