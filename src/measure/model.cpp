#include "sluice/measure/model.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>

#include "pipeline/schedule/chunking.hpp"

namespace sluice {

namespace {

// The engines a run's tasks queue on, each taking its tasks in order. The
// compute streams share one engine, the SMs; the driver is the host thread
// that submits the device operations.
enum Engine { driver, stage_in, h2d, compute, d2h, stage_out, engines };
constexpr std::array<Lane, engines> lane_of{Lane::compute, Lane::stage_in, Lane::h2d, Lane::compute, Lane::d2h,
                                            Lane::stage_out};

Engine engine_of(Stage stage) {
  switch (stage) {
    case Stage::stage_in: return Engine::stage_in;
    case Stage::h2d: return Engine::h2d;
    case Stage::compute: return Engine::compute;
    case Stage::d2h: return Engine::d2h;
    case Stage::stage_out: return Engine::stage_out;
  }
  return Engine::compute;
}

// What the driver's host work per chunk goes to: a kernel launch costs more than a copy.
double submit_share(Stage stage) { return stage == Stage::compute ? 0.4 : 0.3; }

struct Task {
  Engine engine = compute;
  std::size_t chunk = 0;
  double work = 0;     // bytes for copies and staging, ms for compute and the driver
  double latency = 0;  // ms before the work starts moving, once ready
  bool present = true; // false: nothing to do; done as soon as it may start
  std::vector<std::size_t> deps;
  double ready = -1, start = -1, end = -1;  // -1: not yet
  double left = 0;
};

constexpr double never = std::numeric_limits<double>::infinity();

// The tasks of a run: one per operation (index = OpRef::index()), then one
// driver task per submission, in submission order.
std::vector<Task> tasks_of(const Schedule& s, const FixedCosts& fixed, const KernelCost& kernel,
                           std::array<std::vector<std::size_t>, engines>& queues) {
  const std::size_t n = s.chunk_count();
  std::vector<Task> tasks(n * stage_count);
  for (std::size_t c = 0; c < n; ++c)
    for (std::size_t st = 0; st < stage_count; ++st) {
      const Op op = s.op(c, static_cast<Stage>(st));
      Task& t = tasks[op.ref.index()];
      t.engine = engine_of(op.ref.stage);
      t.chunk = c;
      t.present = op.active;
      switch (op.ref.stage) {
        case Stage::compute:
          t.work = kernel.fixed_ms + static_cast<double>(op.items.size()) * kernel.ms_per_item;
          t.latency = fixed.launch_ms;
          break;
        case Stage::h2d:
        case Stage::d2h:
          t.work = static_cast<double>(op.bytes);
          t.latency = op.active ? fixed.copy_ms : 0;
          break;
        // Each staging job is handed to the staging threads, and its end back to the driver or drain.
        case Stage::stage_in:
          t.work = static_cast<double>(op.bytes);
          t.latency = op.active ? fixed.stage_ms : 0;
          break;
        case Stage::stage_out:
          t.work = static_cast<double>(op.bytes);
          t.latency = op.active ? fixed.stage_ms : 0;
          break;
      }
      for (const Edge& e : op.waits) t.deps.push_back(e.on.index());
    }
  for (std::size_t st = 0; st < stage_count; ++st)
    for (std::size_t c = 0; c < n; ++c) queues[engine_of(static_cast<Stage>(st))].push_back(OpRef{c, static_cast<Stage>(st)}.index());
  // The driver submits each device operation once the host may: after what
  // the schedule makes the host wait for (a stage-in done, a slot released
  // by the drain); the operation itself starts no earlier than its submission.
  for (const OpRef ref : s.submission_order()) {
    Task submit;
    submit.engine = driver;
    submit.chunk = ref.chunk;
    submit.work = fixed.chunk_ms * submit_share(ref.stage);
    for (const Edge& e : s.op(ref).waits)
      if (on_host(e.on.stage)) submit.deps.push_back(e.on.index());
    tasks[ref.index()].deps.push_back(tasks.size());
    queues[driver].push_back(tasks.size());
    tasks.push_back(std::move(submit));
  }
  return tasks;
}

}  // namespace

std::vector<SpanShape> array_spans(unsigned inputs, unsigned outputs, std::size_t item_bytes, bool staged) {
  const HostPath path = staged ? HostPath::staged : HostPath::direct;
  std::vector<SpanShape> spans;
  for (unsigned i = 0; i < inputs; ++i) spans.push_back({SpanRole::input, path, item_bytes});
  for (unsigned i = 0; i < outputs; ++i) spans.push_back({SpanRole::output, path, item_bytes});
  return spans;
}

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

Schedule schedule_of(const ModelInput& in) {
  double in_bytes = 0, out_bytes = 0;
  for (const SpanShape& s : in.spans) {
    if (s.copied_in()) in_bytes += static_cast<double>(s.item_bytes);
    if (s.copied_out()) out_bytes += static_cast<double>(s.item_bytes);
  }
  const auto items = static_cast<double>(in.items);
  auto copy_ms = [&](double bytes, double gbps) { return gbps > 0 ? bytes * items / (gbps * 1e6) : 0.0; };
  const bool kernel_bound = kernels_dominate(items * in.kernel.ms_per_item, copy_ms(in_bytes, in.rates.h2d_gbps),
                                             copy_ms(out_bytes, in.rates.d2h_gbps));
  return plan_schedule(in.options, in.spans, in.items, false, kernel_bound);
}

Prediction predict(const ModelInput& in) { return predict(schedule_of(in), in.rates, in.fixed, in.kernel); }

Prediction predict(const Schedule& s, const EngineRates& r, const FixedCosts& fixed, const KernelCost& kernel) {
  const std::size_t n = s.chunk_count();
  Prediction out;
  if (n == 0) {
    out.ms = fixed.run_ms;
    return out;
  }
  if ((s.in_item_bytes() > 0 && r.h2d_gbps <= 0) || (s.out_item_bytes() > 0 && r.d2h_gbps <= 0))
    throw std::invalid_argument("model: the link rates must be known");
  if ((s.stages_in() && r.stage_in_gbps <= 0) || (s.stages_out() && r.stage_out_gbps <= 0))
    throw std::invalid_argument("model: the host staging rates must be known");

  std::array<std::vector<std::size_t>, engines> queues;
  std::vector<Task> tasks = tasks_of(s, fixed, kernel, queues);
  for (Task& t : tasks) t.left = t.work;
  std::array<std::size_t, engines> next{};  // each engine's place in its queue
  std::array<double, engines> free_at{};    // when each engine finished its last task

  double now = 0;
  for (std::size_t guard = 0; guard < 40 * tasks.size() + 1000; ++guard) {
    // Mark ready times; tasks with nothing to do end at once.
    for (bool changed = true; changed;) {
      changed = false;
      for (int e = 0; e < engines; ++e) {
        if (next[e] >= queues[e].size()) continue;
        Task& t = tasks[queues[e][next[e]]];
        if (t.ready >= 0) continue;
        double deps_at = 0;
        for (std::size_t d : t.deps) deps_at = tasks[d].end < 0 || deps_at < 0 ? -1 : std::max(deps_at, tasks[d].end);
        if (deps_at < 0) continue;
        t.ready = std::max(free_at[e], deps_at);
        // The staging threads wait for work when they have none: a job that
        // comes to an idle pool pays for waking them; one queued behind
        // another finds them awake.
        if ((e == stage_in || e == stage_out) && deps_at <= free_at[e]) t.latency = 0;
        if (!t.present) {
          t.start = t.end = free_at[e] = t.ready;
          ++next[e];
          changed = true;
        }
      }
    }
    // What runs now, and what starts next.
    std::array<bool, engines> running{};
    bool any_left = false;
    double next_event = never;
    for (int e = 0; e < engines; ++e) {
      if (next[e] >= queues[e].size()) continue;
      any_left = true;
      Task& t = tasks[queues[e][next[e]]];
      if (t.ready < 0) continue;
      const double go = std::max(t.ready + t.latency, now);
      if (t.ready + t.latency > now + 1e-12) {
        next_event = std::min(next_event, go);
        continue;
      }
      if (t.start < 0) t.start = now;
      running[e] = true;
    }
    if (!any_left) break;
    std::array<double, engines> rate{};  // work per ms
    const bool both_link = running[h2d] && running[d2h];
    const bool both_host = running[stage_in] && running[stage_out];
    auto shared = [](double alone, double both, bool at_once) { return at_once && both > 0 ? std::min(alone, both / 2) : alone; };
    rate[h2d] = shared(r.h2d_gbps, r.both_gbps, both_link) * 1e6;
    rate[d2h] = shared(r.d2h_gbps, r.both_gbps, both_link) * 1e6;
    rate[stage_in] = shared(r.stage_in_gbps, r.stage_both_gbps, both_host) * 1e6;
    rate[stage_out] = shared(r.stage_out_gbps, r.stage_both_gbps, both_host) * 1e6;
    rate[compute] = rate[driver] = 1.0;  // ms of work per ms
    std::array<double, engines> finish{};
    for (int e = 0; e < engines; ++e)
      if (running[e]) {
        const Task& t = tasks[queues[e][next[e]]];
        finish[e] = rate[e] > 0 ? now + t.left / rate[e] : now;
        next_event = std::min(next_event, finish[e]);
      }
    if (next_event == never) throw std::logic_error("model: no task can run (a dependency cycle)");
    const double step = next_event - now;
    for (int e = 0; e < engines; ++e) {
      if (!running[e]) continue;
      Task& t = tasks[queues[e][next[e]]];
      // Ends by time, not by what is left: a step's rounding must not leave a crumb of work.
      if (finish[e] <= next_event + 1e-12) {
        t.left = 0;
        t.end = free_at[e] = next_event;
        ++next[e];
      } else {
        t.left -= rate[e] * step;
      }
    }
    now = next_event;
  }

  for (int e = 0; e < engines; ++e)
    if (next[e] < queues[e].size()) throw std::logic_error("model: the run did not finish (a task never became ready)");
  double end = 0;
  std::array<double, engines> busy{};
  for (const Task& t : tasks) {
    end = std::max(end, t.end);
    if (!t.present || t.engine == driver) continue;
    busy[t.engine] += t.end - t.start;
    out.timeline.push_back({lane_of[t.engine], t.chunk, t.start, t.end,
                            static_cast<std::size_t>(t.engine == compute ? 0 : t.work), 0});
  }
  out.ms = end + fixed.run_ms;
  const auto busiest = std::max_element(busy.begin(), busy.end()) - busy.begin();
  out.busiest = std::string(to_string(lane_of[static_cast<std::size_t>(busiest)]));
  return out;
}

}  // namespace sluice
