// The soak: thousands of runs of random shapes on the host executor, every
// output verified, and nothing growing. Spans of six item sizes in every
// kind of memory and role, item counts from 0 up, equal, ramped and short
// last chunks, depths 1-8, every host-memory policy, both kernel orders and
// up to three compute streams, run() and submit(); pipelines made fresh,
// run again, rebound to new memory, cleared and given new spans, and now
// and then made to fail. After every run: no page-locked range the caller
// does not hold, no lane thread of a pipeline that is gone, no slot memory
// grown by a run of a shape the pipeline ran before. At checkpoints, with
// every pipeline gone: no executor memory, threads or descriptors left.
//
// SLUICE_SOAK_RUNS and SLUICE_SOAK_SEED change the length and the seed (the
// seed is printed, so a failure can be run again).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "run_probes.hpp"
#include "sluice/pipeline/host_executor.hpp"
#include "sluice/pipeline/pipeline.hpp"
#include "soak_spans.hpp"

using sluice::Chunk;
using sluice::HostExecutor;
using sluice::HostExecutorOptions;
using sluice::HostMemoryPolicy;
using sluice::InjectedFault;
using sluice::ItemRange;
using sluice::KernelOrder;
using sluice::Pipeline;
using sluice::PipelineOptions;
using sluice::RunReport;
using sluice::SpanRole;
using sluice::Stage;
using namespace sluice::test;

namespace {

std::uint64_t from_env(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  return text && *text ? std::strtoull(text, nullptr, 10) : fallback;
}

struct SoakComputeFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the compute callable of one span set sees, checked after each run.
struct ComputeLog {
  std::vector<std::shared_ptr<SoakSpan>> spans;
  bool in_chunk_order = true;
  std::optional<std::size_t> throw_at;
  std::mutex mutex;
  std::vector<ItemRange> chunks;
  std::vector<std::size_t> done;
  bool watch_done = false;  // a chunk-done callable was set for this run
  std::size_t next = 0;
  std::string error;

  void compute(const Chunk& c) {
    if (throw_at == c.index) throw SoakComputeFault("chunk " + std::to_string(c.index) + " gave up");
    std::vector<std::uint64_t> sums(c.size());
    for (std::size_t i = 0; i < sums.size(); ++i) sums[i] = c.items.begin + i;
    for (const auto& span : spans) span->add_inputs(c, sums);
    std::size_t writer = 0;
    for (const auto& span : spans)
      if (span->written()) span->store(c, sums, writer++);
    std::lock_guard lock(mutex);
    if (in_chunk_order && c.index != next && error.empty())
      error = "kernel of chunk " + std::to_string(c.index) + " ran before chunk " + std::to_string(next) + "'s";
    next = c.index + 1;
    chunks.push_back(c.items);
  }
};

// A pipeline the soak keeps for a while, and the spans it runs now.
struct Slot {
  HostExecutor* host = nullptr;
  PipelineOptions options;
  std::unique_ptr<Pipeline> pipeline;
  std::size_t items = 0;
  std::vector<std::shared_ptr<SoakSpan>> spans;
  std::shared_ptr<ComputeLog> log;
  std::optional<std::size_t> last_chunks;  // of its last run that went through, spans unchanged since
  double last_staged_bytes = 0;            // ...and the bytes it staged: the same, its spans took the same paths
};

struct Tally {
  std::size_t runs = 0, verified = 0, faults = 0, pipelines = 0, rebinds = 0, respans = 0, checkpoints = 0;
};

class Soak {
 public:
  explicit Soak(std::uint64_t seed) : rng_(seed) {
    HostExecutorOptions calm, jittery;
    calm.seed = seed;
    jittery.seed = seed + 1;
    jittery.jitter_us = 5;  // lanes meet in other orders
    executors_.push_back(std::make_unique<HostExecutor>(calm));
    executors_.push_back(std::make_unique<HostExecutor>(jittery));
    slots_.resize(3);
    threads_ = process_threads();
    descriptors_ = open_descriptors();
  }

  // One step: a slot is made, given new spans or new memory, or kept, then
  // run (now and then with a fault, then again without).
  void step() {
    Slot& s = slots_[pick(slots_.size())];
    const std::size_t action = pick(100);
    bool fault = false;
    if (!s.pipeline || action < 12) {
      make_pipeline(s);
    } else if (action < 27) {
      respan(s);
    } else if (action < 42 && rebindable(s)) {
      rebind(s);
    } else {
      fault = action >= 80 && s.last_chunks.value_or(0) > 0;
    }
    if (fault) run_failing(s);
    run_verified(s);
  }

  // Every pipeline gone: nothing of theirs may be left.
  void checkpoint() {
    for (Slot& s : slots_) s = Slot{};
    for (const auto& host : executors_) {
      const HostExecutor::Holdings h = host->holdings();
      EXPECT_EQ(h.device_bytes, 0u) << "device memory left";
      EXPECT_EQ(h.pinned_bytes, 0u) << "pinned memory left";
      EXPECT_EQ(h.locked_ranges, 0u) << "page-locked ranges left";
      EXPECT_EQ(h.lane_threads, 0u) << "lane threads left";
      EXPECT_TRUE(host->violations().empty()) << host->violations().front();
    }
    EXPECT_EQ(settled_threads(threads_), threads_) << "threads left";
    EXPECT_EQ(open_descriptors(), descriptors_) << "descriptors left";
    ++tally_.checkpoints;
  }

  const Tally& tally() const { return tally_; }

 private:
  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  std::size_t between(std::size_t lo, std::size_t hi) { return lo + pick(hi - lo + 1); }

  PipelineOptions random_options() {
    PipelineOptions o;
    o.depth = between(1, 8);
    o.kernel_order = pick(2) ? KernelOrder::independent : KernelOrder::in_chunk_order;
    o.compute_streams = static_cast<unsigned>(o.kernel_order == KernelOrder::independent ? pick(4) : pick(2));
    o.staging_threads = static_cast<unsigned>(between(1, 2));
    o.host_memory = std::array{HostMemoryPolicy::stage, HostMemoryPolicy::register_memory,
                               HostMemoryPolicy::automatic}[pick(3)];
    o.record = pick(8) == 0;
    switch (pick(3)) {
      case 0: break;  // the pipeline's own chunking
      case 1:         // equal chunks, the last one short unless the items divide
        o.chunk_items = between(1, 400);
        o.ramp = false;
        break;
      default:  // ramped up from first_chunk_items and down again
        o.chunk_items = between(8, 400);
        o.first_chunk_items = between(1, o.chunk_items);
        break;
    }
    return o;
  }

  // Item counts from 0 up, at most ~64 chunks of the slot's size.
  std::size_t random_items(const PipelineOptions& o) {
    const std::size_t most = std::min<std::size_t>(4000, std::max<std::size_t>(o.chunk_items, 16) * 64);
    switch (pick(10)) {
      case 0: return 0;
      case 1: return 1;
      case 2:
      case 3:
      case 4: return between(2, 64);
      default: return between(65, most);
    }
  }

  std::shared_ptr<SoakSpan> random_span(HostExecutor& host, std::size_t items) {
    const std::size_t r = pick(100);
    const SpanRole role = r < 45 ? SpanRole::input : r < 80 ? SpanRole::output : SpanRole::inout;
    Memory memory = std::array{Memory::pageable, Memory::pinned, Memory::registered, Memory::source}[pick(4)];
    if (memory == Memory::source && role != SpanRole::input) memory = role == SpanRole::output ? Memory::sink : Memory::pageable;
    switch (pick(6)) {
      case 0: return std::make_shared<TypedSpan<std::uint8_t>>(role, memory, host, items);
      case 1: return std::make_shared<TypedSpan<std::uint16_t>>(role, memory, host, items);
      case 2: return std::make_shared<TypedSpan<std::uint32_t>>(role, memory, host, items);
      case 3: return std::make_shared<TypedSpan<std::uint64_t>>(role, memory, host, items);
      case 4: return std::make_shared<TypedSpan<Wide12>>(role, memory, host, items);
      default: return std::make_shared<TypedSpan<Wide40>>(role, memory, host, items);
    }
  }

  void make_pipeline(Slot& s) {
    s = Slot{};  // the old one goes first: its lanes and memory must come back
    s.host = executors_[pick(executors_.size())].get();
    s.options = random_options();
    s.pipeline = std::make_unique<Pipeline>(s.options, *s.host);
    ++tally_.pipelines;
    add_spans(s);
  }

  void respan(Slot& s) {
    s.pipeline->clear_spans();
    s.spans.clear();
    ++tally_.respans;
    add_spans(s);
  }

  void add_spans(Slot& s) {
    s.items = random_items(s.options);
    const std::size_t count = between(1, 4);
    for (std::size_t k = 0; k < count; ++k) s.spans.push_back(random_span(*s.host, s.items));
    for (const auto& span : s.spans) span->add_to(*s.pipeline);
    s.log = std::make_shared<ComputeLog>();
    s.log->spans = s.spans;
    s.log->in_chunk_order = s.options.kernel_order == KernelOrder::in_chunk_order;
    s.pipeline->compute([log = s.log](const Chunk& c) { log->compute(c); });
    s.last_chunks.reset();
  }

  static bool rebindable(const Slot& s) {
    return std::all_of(s.spans.begin(), s.spans.end(), [](const auto& span) { return span->host_memory(); });
  }
  void rebind(Slot& s) {
    s.items = random_items(s.options);
    for (const auto& span : s.spans) span->rebind(*s.pipeline, s.items);
    s.last_chunks.reset();
    ++tally_.rebinds;
  }

  // Starts a run of `s` with fresh values: run() or submit(), a chunk-done callable or none.
  RunReport start(Slot& s) {
    const std::uint64_t seed = rng_();
    for (const auto& span : s.spans) span->prepare(seed);
    {
      std::lock_guard lock(s.log->mutex);
      s.log->chunks.clear();
      s.log->done.clear();
      s.log->next = 0;
      s.log->error.clear();
      s.log->watch_done = pick(4) == 0;
    }
    if (s.log->watch_done)
      s.pipeline->on_chunk_done([log = s.log](std::size_t index, ItemRange) {
        std::lock_guard lock(log->mutex);
        log->done.push_back(index);
      });
    else
      s.pipeline->on_chunk_done(nullptr);
    ++tally_.runs;
    return pick(2) ? s.pipeline->submit().wait() : s.pipeline->run();
  }

  void run_failing(Slot& s) {
    const std::size_t chunk = pick(*s.last_chunks);
    std::vector<std::shared_ptr<SoakSpan>> components;
    for (const auto& span : s.spans)
      if (!span->host_memory()) components.push_back(span);
    const std::size_t kind = pick(components.empty() ? 3 : 4);
    if (kind == 0) {
      s.host->inject({InjectedFault::Kind::execution, {chunk, std::array{Stage::h2d, Stage::compute, Stage::d2h, Stage::stage_out}[pick(4)]}});
    } else if (kind == 1) {
      s.host->inject({InjectedFault::Kind::submit, {chunk, std::array{Stage::h2d, Stage::compute, Stage::d2h}[pick(3)]}});
    } else if (kind == 2) {
      s.log->throw_at = chunk;
    } else {
      components[pick(components.size())]->fail_at(pick(s.items));
    }
    EXPECT_ANY_THROW(start(s)) << describe(s);
    ++tally_.faults;
    s.host->clear_faults();
    s.log->throw_at.reset();
    for (const auto& span : components) span->fail_at(std::nullopt);
    expect_holdings(s);
  }

  void run_verified(Slot& s) {
    const HostExecutor::Holdings before = s.host->holdings();
    const std::optional<std::size_t> ran_before = s.last_chunks;
    RunReport report;
    try {
      report = start(s);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "run failed: " << e.what() << "\n" << describe(s);
      return;
    }
    ++tally_.verified;
    EXPECT_TRUE(outputs_right(s, report)) << describe(s);
    expect_holdings(s);
    const double staged = report.volume.staged_in_bytes + report.volume.staged_out_bytes;
    if (ran_before && staged == s.last_staged_bytes) {
      // A shape the pipeline ran before, over the same paths, needs nothing new. (A
      // span's path changes when a neighbour's page-locking that covered its
      // edge pages ends: it is staged then.)
      const HostExecutor::Holdings after = s.host->holdings();
      EXPECT_EQ(report.device_bytes_allocated + report.pinned_bytes_allocated, 0u) << describe(s);
      EXPECT_EQ(after.device_bytes, before.device_bytes) << "device memory grew\n" << describe(s);
      EXPECT_EQ(after.pinned_bytes, before.pinned_bytes) << "pinned memory grew\n" << describe(s);
    }
    s.last_chunks = report.chunk_count;
    s.last_staged_bytes = staged;
  }

  ::testing::AssertionResult outputs_right(Slot& s, const RunReport& report) {
    ComputeLog& log = *s.log;
    std::lock_guard lock(log.mutex);
    if (!log.error.empty()) return ::testing::AssertionFailure() << log.error;
    // The chunks tile the items, none larger than the plan's largest.
    std::vector<ItemRange> chunks = log.chunks;
    std::sort(chunks.begin(), chunks.end(), [](ItemRange a, ItemRange b) { return a.begin < b.begin; });
    if (chunks.size() != report.chunk_count || report.item_count != s.items)
      return ::testing::AssertionFailure() << chunks.size() << " chunks computed, report: " << report.chunk_count
                                           << " chunks of " << report.item_count << " items";
    std::size_t end = 0;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      if (chunks[c].begin != end || chunks[c].size() == 0 || chunks[c].size() > report.chunk_items)
        return ::testing::AssertionFailure() << "chunk " << c << " is " << chunks[c].begin << ".." << chunks[c].end;
      const bool equal_plan = s.options.chunk_items > 0 && !s.options.ramp;
      if (equal_plan && c + 1 < chunks.size() && chunks[c].size() != s.options.chunk_items)
        return ::testing::AssertionFailure() << "chunk " << c << " of an equal plan has " << chunks[c].size() << " items";
      end = chunks[c].end;
    }
    if (end != s.items) return ::testing::AssertionFailure() << "chunks end at " << end;
    if (log.watch_done) {
      if (log.done.size() != chunks.size()) return ::testing::AssertionFailure() << log.done.size() << " chunk-done calls";
      for (std::size_t c = 0; c < log.done.size(); ++c)
        if (log.done[c] != c) return ::testing::AssertionFailure() << "chunk-done calls out of order";
    }
    // Every written span holds what its inputs give.
    std::vector<std::uint64_t> sums(s.items);
    for (std::size_t i = 0; i < s.items; ++i) {
      sums[i] = i;
      for (const auto& span : s.spans)
        if (span->read()) sums[i] += span->input_value(i);
    }
    std::size_t writer = 0;
    for (const auto& span : s.spans)
      if (span->written())
        if (auto right = span->check(sums, writer++); !right) return right;
    return ::testing::AssertionSuccess();
  }

  // Between runs an executor holds the lanes of its live pipelines and the
  // ranges their callers page-locked, nothing more; and no edge was broken.
  void expect_holdings(const Slot& s) {
    std::size_t lanes = 0, locked = 0;
    for (const Slot& other : slots_) {
      if (!other.pipeline || other.host != s.host) continue;
      lanes += 2 + sluice::compute_stream_count(other.options);
      for (const auto& span : other.spans) locked += span->registrations();
    }
    const HostExecutor::Holdings h = s.host->holdings();
    EXPECT_EQ(h.lane_threads, lanes);
    EXPECT_EQ(h.locked_ranges, locked) << "page-locked ranges the caller does not hold\n" << describe(s);
    EXPECT_TRUE(s.host->violations().empty()) << s.host->violations().front() << "\n" << describe(s);
  }

  static std::string describe(const Slot& s) {
    const PipelineOptions& o = s.options;
    std::string text = "pipeline: depth " + std::to_string(o.depth) + ", chunk_items " + std::to_string(o.chunk_items) +
                       ", first_chunk_items " + std::to_string(o.first_chunk_items) + ", ramp " + std::to_string(o.ramp) +
                       ", " + (o.kernel_order == KernelOrder::independent ? "independent" : "in chunk order") +
                       ", streams " + std::to_string(o.compute_streams) + ", " +
                       std::array{"stage", "register_memory", "automatic"}[static_cast<int>(o.host_memory)] + "; " +
                       std::to_string(s.items) + " items:";
    for (const auto& span : s.spans) text += " [" + span->text() + "]";
    return text;
  }

  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<HostExecutor>> executors_;
  std::vector<Slot> slots_;
  std::size_t threads_ = 0, descriptors_ = 0;
  Tally tally_;
};

}  // namespace

TEST(Soak, ThousandsOfRandomRunsAllRightWithNothingLeftBehind) {
  const std::uint64_t runs = from_env("SLUICE_SOAK_RUNS", 2000);
  const std::uint64_t seed = from_env("SLUICE_SOAK_SEED", 22);
  Soak soak(seed);
  while (soak.tally().verified < runs) {
    within(std::chrono::seconds(60), "soak run " + std::to_string(soak.tally().runs) + " (seed " + std::to_string(seed) + ")",
           [&] { soak.step(); });
    if (HasFailure()) break;  // the first failure says it all; the rest would repeat it
    if (soak.tally().verified % 500 == 0) soak.checkpoint();
  }
  soak.checkpoint();
  const Tally& t = soak.tally();
  std::printf("[soak] seed %llu: %zu runs (%zu verified, %zu with a fault), %zu pipelines made, %zu span sets replaced, "
              "%zu rebinds, %zu leak checkpoints, leaks found: %s\n",
              static_cast<unsigned long long>(seed), t.runs, t.verified, t.faults, t.pipelines, t.respans, t.rebinds,
              t.checkpoints, HasFailure() ? "see failures" : "0");
  EXPECT_GE(t.verified, runs);
}
