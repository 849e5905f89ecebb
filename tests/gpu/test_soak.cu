// The soak on the GPU: at least 500 runs of random shapes through a real
// kernel, every output verified, and nothing growing: device memory
// (cudaMemGetInfo), registrations (no lent vector left page-locked after a
// run), threads and descriptors, with every pipeline gone; and no slot
// memory allocated by a run of a shape its pipeline ran before. Pageable,
// pinned and caller-registered spans, sources and sinks; item counts from 0
// to 2 Mi; equal, ramped and short last chunks; depths 1-8; every
// host-memory policy; both kernel orders; pipelines made, run again,
// rebound and given new spans; now and then a run made to fail first.
//
// SLUICE_SOAK_RUNS and SLUICE_SOAK_SEED change the length and the seed.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../host/run_probes.hpp"
#include "gpu_test.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/host_registration.hpp"
#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/pointer_query.hpp"
#include "sluice/pipeline/pipeline.hpp"

using sluice::Chunk;
using sluice::HostMemoryPolicy;
using sluice::ItemRange;
using sluice::KernelOrder;
using sluice::MemoryKind;
using sluice::Pipeline;
using sluice::PipelineOptions;
using sluice::RunReport;
using sluice::SpanRole;
using namespace sluice::test;

namespace {

constexpr std::size_t max_spans = 4;

// Chunk c's items: sum = index + every input; the j-th written span gets sum * (j + 3) + 1.
struct Spans {
  const std::uint32_t* in[max_spans];
  std::uint32_t* out[max_spans];
  int inputs = 0, outputs = 0;
  std::size_t begin = 0, n = 0;
};
__global__ void combine(Spans s) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < s.n; i += std::size_t{gridDim.x} * blockDim.x) {
    auto sum = static_cast<std::uint32_t>(s.begin + i);
    for (int k = 0; k < s.inputs; ++k) sum += s.in[k][i];
    for (int j = 0; j < s.outputs; ++j) s.out[j][i] = sum * static_cast<std::uint32_t>(j + 3) + 1;
  }
}

enum class Memory { pageable, pinned, registered, source, sink };
const char* name(Memory m) { return std::array{"pageable", "pinned", "registered", "source", "sink"}[static_cast<int>(m)]; }
constexpr std::uint32_t poison = 0xA5A5A5A5;

std::uint64_t from_env(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  return text && *text ? std::strtoull(text, nullptr, 10) : fallback;
}

using Source = PatternSource<std::uint32_t, std::function<std::uint32_t(std::size_t)>>;
using Sink = RecordingSink<std::uint32_t>;

class GpuSpan {
 public:
  GpuSpan(SpanRole span_role, Memory span_memory, std::size_t count) : role(span_role), memory(span_memory) {
    if (memory == Memory::source) {
      source = std::make_shared<Source>(count, [this](std::size_t i) { return value(i); });
    } else if (memory == Memory::sink) {
      sink = std::make_shared<Sink>(count);
    } else {
      allocate(count);
    }
  }
  ~GpuSpan() { registration.reset(); }  // before the memory it covers goes

  bool read() const { return role != SpanRole::output; }
  bool written() const { return role != SpanRole::input; }
  bool host_memory() const { return !source && !sink; }
  std::uint32_t value(std::size_t i) const { return static_cast<std::uint32_t>(item_value(seed, i)); }
  std::span<std::uint32_t> items() const { return view; }
  std::span<const std::uint32_t> results() const { return sink ? std::span<const std::uint32_t>(sink->pending) : items(); }

  void add_to(Pipeline& p) {
    if (source) {
      in = p.input(sluice::SourceOf<std::uint32_t>{source});
    } else if (sink) {
      out = p.output(sluice::SinkOf<std::uint32_t>{sink});
    } else if (role == SpanRole::input) {
      in = p.input(items());
    } else if (role == SpanRole::output) {
      out = p.output(items());
    } else {
      out = p.inout(items());
    }
  }
  void rebind(Pipeline& p, std::size_t count) {
    allocate(count);
    if (role == SpanRole::input) {
      p.rebind(in, items());
    } else {
      p.rebind(out, items());
    }
  }
  void prepare(std::uint64_t run_seed) {
    seed = run_seed;
    if (sink) sink->reset(poison);
    if (!host_memory()) return;
    const auto values = items();
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = read() ? value(i) : poison;
  }
  // Lent memory is pageable once a run has returned; a caller's registration stays.
  bool kind_right() const {
    if (!host_memory() || items().empty() || memory == Memory::pinned) return true;
    const MemoryKind kind = sluice::memory_kind(items().data(), items().size_bytes());
    return memory == Memory::registered ? sluice::is_page_locked_host(kind) : kind == MemoryKind::pageable;
  }

  SpanRole role;
  Memory memory;
  std::uint64_t seed = 0;
  std::vector<std::uint32_t> vector;
  sluice::PinnedBuffer<std::uint32_t> pinned;
  std::span<std::uint32_t> view;  // the span's items, in `vector` or `pinned`
  std::optional<sluice::HostRegistration> registration;
  std::shared_ptr<Source> source;
  std::shared_ptr<Sink> sink;
  sluice::SpanHandle<const std::uint32_t> in;
  sluice::SpanHandle<std::uint32_t> out;

 private:
  void allocate(std::size_t count) {
    registration.reset();
    view = {};
    if (memory == Memory::pinned) {
      pinned = sluice::PinnedBuffer<std::uint32_t>(count);
      view = pinned.span();
      return;
    }
    if (memory != Memory::registered || count == 0) {
      std::vector<std::uint32_t>(count).swap(vector);
      view = vector;
      return;
    }
    // Whole pages of its own: a second registration of a page a neighbour
    // has registered is refused, and the pipeline's page-locking leaves the
    // caller's pages alone.
    constexpr std::size_t page_items = 4096 / sizeof(std::uint32_t);
    std::vector<std::uint32_t>(count + 2 * page_items).swap(vector);
    const auto address = reinterpret_cast<std::uintptr_t>(vector.data());
    const std::size_t skip = (4096 - address % 4096) % 4096 / sizeof(std::uint32_t);
    view = std::span<std::uint32_t>(vector.data() + skip, count);
    registration.emplace(view.data(), (count + page_items - 1) / page_items * 4096);
  }
};

struct Log {
  std::vector<std::shared_ptr<GpuSpan>> spans;
  bool in_chunk_order = true;
  std::optional<std::size_t> throw_at;
  std::mutex mutex;
  std::vector<ItemRange> chunks;
  std::size_t next = 0;
  std::string error;
};

struct Slot {
  PipelineOptions options;
  std::unique_ptr<Pipeline> pipeline;
  std::size_t items = 0;
  std::vector<std::shared_ptr<GpuSpan>> spans;
  std::shared_ptr<Log> log;
  std::optional<std::size_t> last_chunks;
  double last_staged = 0;
};

std::size_t used_device_bytes() {
  std::size_t free_bytes = 0, total = 0;
  SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return total - free_bytes;
}

class GpuSoak : public GpuTest {
 protected:
  std::mt19937_64 rng{from_env("SLUICE_SOAK_SEED", 22)};
  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); }
  std::size_t between(std::size_t lo, std::size_t hi) { return lo + pick(hi - lo + 1); }

  PipelineOptions random_options() {
    PipelineOptions o;
    o.depth = between(1, 8);
    o.kernel_order = pick(2) ? KernelOrder::independent : KernelOrder::in_chunk_order;
    o.compute_streams = static_cast<unsigned>(o.kernel_order == KernelOrder::independent ? pick(4) : pick(2));
    o.host_memory = std::array{HostMemoryPolicy::stage, HostMemoryPolicy::register_memory, HostMemoryPolicy::automatic}[pick(3)];
    o.record = pick(8) == 0;
    if (const std::size_t plan = pick(3); plan == 1) {
      o.chunk_items = std::size_t{1} << between(8, 19);
      o.ramp = false;
    } else if (plan == 2) {
      o.chunk_items = std::size_t{1} << between(10, 19);
      o.first_chunk_items = o.chunk_items >> between(1, 6);
    }
    return o;
  }
  std::size_t random_items(const PipelineOptions& o) {
    const std::size_t most = std::min<std::size_t>(std::size_t{2} << 20, std::max<std::size_t>(o.chunk_items, 4096) * 64);
    switch (pick(10)) {
      case 0: return 0;
      case 1: return 1;
      case 2: return between(2, 4096);
      default: return between(4097, most);
    }
  }

  void add_spans(Slot& s) {
    s.items = random_items(s.options);
    s.spans.clear();
    for (std::size_t k = 0, count = between(1, max_spans); k < count; ++k) {
      const std::size_t r = pick(100);
      const SpanRole role = r < 45 ? SpanRole::input : r < 80 ? SpanRole::output : SpanRole::inout;
      Memory memory = std::array{Memory::pageable, Memory::pinned, Memory::registered, Memory::source}[pick(4)];
      if (memory == Memory::source && role != SpanRole::input) memory = role == SpanRole::output ? Memory::sink : Memory::pageable;
      s.spans.push_back(std::make_shared<GpuSpan>(role, memory, s.items));
    }
    for (const auto& span : s.spans) span->add_to(*s.pipeline);
    s.log = std::make_shared<Log>();
    s.log->spans = s.spans;
    s.log->in_chunk_order = s.options.kernel_order == KernelOrder::in_chunk_order;
    s.pipeline->compute([log = s.log](const Chunk& c) {
      if (log->throw_at == c.index) throw std::runtime_error("chunk " + std::to_string(c.index) + " gave up");
      Spans k{};
      for (const auto& span : log->spans) {
        if (span->read()) k.in[k.inputs++] = span->role == SpanRole::inout ? c[span->out].data() : c[span->in].data();
        if (span->written()) k.out[k.outputs++] = c[span->out].data();
      }
      k.begin = c.items.begin;
      k.n = c.size();
      if (k.n > 0)
        combine<<<static_cast<unsigned>(std::min<std::size_t>((k.n + 255) / 256, 1024)), 256, 0, c.stream.get()>>>(k);
      std::lock_guard lock(log->mutex);
      if (log->in_chunk_order && c.index != log->next && log->error.empty())
        log->error = "kernel of chunk " + std::to_string(c.index) + " launched before chunk " + std::to_string(log->next) + "'s";
      log->next = c.index + 1;
      log->chunks.push_back(c.items);
    });
    s.last_chunks.reset();
  }

  RunReport start(Slot& s) {
    const std::uint64_t seed = rng();
    for (const auto& span : s.spans) span->prepare(seed);
    {
      std::lock_guard lock(s.log->mutex);
      s.log->chunks.clear();
      s.log->next = 0;
      s.log->error.clear();
    }
    return pick(2) ? s.pipeline->submit().wait() : s.pipeline->run();
  }

  ::testing::AssertionResult right(Slot& s, const RunReport& report) {
    std::lock_guard lock(s.log->mutex);
    if (!s.log->error.empty()) return ::testing::AssertionFailure() << s.log->error;
    auto chunks = s.log->chunks;
    std::sort(chunks.begin(), chunks.end(), [](ItemRange a, ItemRange b) { return a.begin < b.begin; });
    std::size_t end = 0;
    for (const ItemRange& r : chunks) {
      if (r.begin != end || r.size() == 0 || r.size() > report.chunk_items)
        return ::testing::AssertionFailure() << "chunk " << r.begin << ".." << r.end << " does not follow " << end;
      end = r.end;
    }
    if (end != s.items || chunks.size() != report.chunk_count) return ::testing::AssertionFailure() << "chunks end at " << end;
    std::vector<std::uint32_t> sums(s.items);
    for (std::size_t i = 0; i < s.items; ++i) {
      sums[i] = static_cast<std::uint32_t>(i);
      for (const auto& span : s.spans)
        if (span->read()) sums[i] += span->value(i);
    }
    std::size_t writer = 0;
    for (const auto& span : s.spans) {
      if (!span->kind_right()) return ::testing::AssertionFailure() << name(span->memory) << " span left page-locked or not";
      if (!span->written()) continue;
      const auto got = span->results();
      const auto factor = static_cast<std::uint32_t>(writer + 3);
      for (std::size_t i = 0; i < s.items; ++i)
        if (got[i] != sums[i] * factor + 1)
          return ::testing::AssertionFailure() << name(span->memory) << " span: item " << i << " of " << s.items << " is wrong";
      if (span->sink && (contiguous_end(span->sink->writes) != std::optional<std::size_t>(s.items) || span->sink->commits != 1 ||
                         !span->sink->abandons.empty()))
        return ::testing::AssertionFailure() << "sink not written in order and committed once";
      ++writer;
    }
    return ::testing::AssertionSuccess();
  }

  static std::string describe(const Slot& s) {
    std::string text = "depth " + std::to_string(s.options.depth) + ", chunk_items " + std::to_string(s.options.chunk_items) +
                       ", first " + std::to_string(s.options.first_chunk_items) + ", ramp " + std::to_string(s.options.ramp) +
                       ", streams " + std::to_string(s.options.compute_streams) + ", policy " +
                       std::to_string(static_cast<int>(s.options.host_memory)) + "; " + std::to_string(s.items) + " items:";
    for (const auto& span : s.spans)
      text += std::string(" [") + (span->read() ? "r" : "") + (span->written() ? "w" : "") + " " + name(span->memory) + "]";
    return text;
  }
};

}  // namespace

TEST_F(GpuSoak, HundredsOfRandomRunsAllRightWithNothingLeftBehind) {
  const std::uint64_t runs = from_env("SLUICE_SOAK_RUNS", 500);
  std::vector<Slot> slots(3);
  std::size_t verified = 0, failed_on_purpose = 0, made = 0, total = 0;
  std::optional<std::size_t> device_baseline, threads_baseline, descriptors_baseline;
  auto checkpoint = [&] {
    for (Slot& s : slots) s = Slot{};
    const std::size_t device = used_device_bytes(), threads = process_threads(), descriptors = open_descriptors();
    if (!device_baseline) {  // the first checkpoint, after the CUDA runtime has made what it keeps
      device_baseline = device;
      threads_baseline = threads;
      descriptors_baseline = descriptors;
      return;
    }
    // One 2 MiB page of slack for the driver's own bookkeeping.
    EXPECT_LE(device, *device_baseline + (std::size_t{2} << 20)) << "device memory grew";
    EXPECT_EQ(settled_threads(*threads_baseline), *threads_baseline) << "threads left";
    EXPECT_EQ(open_descriptors(), *descriptors_baseline) << "descriptors left";
  };
  while (verified < runs && !HasFailure()) {
    Slot& s = slots[pick(slots.size())];
    const std::size_t action = pick(100);
    bool fail_first = false;
    if (!s.pipeline || action < 12) {
      s = Slot{};
      s.options = random_options();
      s.pipeline = std::make_unique<Pipeline>(s.options);
      ++made;
      add_spans(s);
    } else if (action < 27) {
      s.pipeline->clear_spans();
      add_spans(s);
    } else if (action < 42 && std::all_of(s.spans.begin(), s.spans.end(), [](const auto& x) { return x->host_memory(); })) {
      s.items = random_items(s.options);
      for (const auto& span : s.spans) span->rebind(*s.pipeline, s.items);
      s.last_chunks.reset();
    } else {
      fail_first = action >= 88 && s.last_chunks.value_or(0) > 0;
    }
    within(std::chrono::seconds(120), "GPU soak run " + std::to_string(total), [&] {
      if (fail_first) {
        const std::size_t chunk = pick(*s.last_chunks);
        GpuSpan* component = nullptr;
        for (const auto& span : s.spans)
          if (!span->host_memory()) component = span.get();
        if (component && pick(2)) {
          if (component->source) component->source->fail_at = pick(s.items);
          if (component->sink) component->sink->fail_at = pick(s.items);
        } else {
          s.log->throw_at = chunk;
        }
        EXPECT_ANY_THROW(start(s)) << describe(s);
        ++total;
        ++failed_on_purpose;
        s.log->throw_at.reset();
        if (component && component->source) component->source->fail_at.reset();
        if (component && component->sink) component->sink->fail_at.reset();
      }
      const std::optional<std::size_t> ran_before = s.last_chunks;
      RunReport report;
      try {
        report = start(s);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "run failed: " << e.what() << "\n" << describe(s);
        return;
      }
      ++total;
      ++verified;
      EXPECT_TRUE(right(s, report)) << describe(s);
      const double staged = report.volume.staged_in_bytes + report.volume.staged_out_bytes;
      if (ran_before && staged == s.last_staged)
        EXPECT_EQ(report.device_bytes_allocated + report.pinned_bytes_allocated, 0u)
            << "a shape run before allocated slot memory\n" << describe(s);
      s.last_chunks = report.chunk_count;
      s.last_staged = staged;
    });
    if (verified % 100 == 0) checkpoint();
  }
  checkpoint();
  std::printf("[soak] GPU: %zu runs (%zu verified, %zu made to fail first), %zu pipelines made, leaks found: %s\n", total,
              verified, failed_on_purpose, made, HasFailure() ? "see failures" : "0");
  EXPECT_GE(verified, runs);
}
