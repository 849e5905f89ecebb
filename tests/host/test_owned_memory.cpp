// Memory whose owner the pipeline holds (a Python array, through the
// untyped entry point) may stay page-locked between runs, but never past
// the moment the pipeline lets its owner go: memory freed while page-locked
// is handed out again at the same addresses, and the driver then takes the
// new memory for page-locked (PyTorch's own copies from it fail with
// "invalid argument"). Each test lets the owner go along one path a
// pipeline's life can take and checks, at the moment of release, that no
// range is page-locked any more.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <span>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "pipeline/pipeline_access.hpp"
#include "sluice/pipeline/host_executor.hpp"
#include "sluice/pipeline/pipeline.hpp"

using sluice::Chunk;
using sluice::HostExecutor;
using sluice::HostMemoryPolicy;
using sluice::Pipeline;
using sluice::PipelineOptions;
using sluice::Replay;
using sluice::SpanRole;
using sluice::detail::PipelineAccess;

namespace {

constexpr std::size_t items = 1 << 16;

// Owned memory whose release records how many ranges the executor still
// counted as page-locked at that moment.
struct Owned {
  std::shared_ptr<const void> owner;
  const std::uint32_t* data = nullptr;
};

struct Releases {
  std::atomic<int> count{0};
  std::atomic<std::size_t> locked_at_release{0};
};

Owned make_owned(const HostExecutor& host, Releases& releases, std::uint32_t first) {
  auto* memory = new std::vector<std::uint32_t>(items);
  for (std::size_t i = 0; i < items; ++i) (*memory)[i] = first + static_cast<std::uint32_t>(i);
  Owned o;
  o.data = memory->data();
  o.owner = std::shared_ptr<const void>(memory, [&host, &releases](const std::vector<std::uint32_t>* v) {
    releases.locked_at_release += host.holdings().locked_ranges;
    ++releases.count;
    delete v;
  });
  return o;
}

PipelineOptions options() {
  PipelineOptions o;
  o.host_memory = HostMemoryPolicy::automatic;
  o.chunk_items = items / 8;
  o.staging_threads = 1;
  return o;
}

// A pipeline from owned memory into a pinned buffer: out = in + 1.
struct OwnedPipeline {
  HostExecutor::Buffer out;
  std::optional<Pipeline> p;
  std::size_t in = 0;
  std::uint64_t generation = 0;

  OwnedPipeline(HostExecutor& host, Owned input, Replay replay = Replay::none)
      : out(host.allocate_pinned(items * sizeof(std::uint32_t))) {
    p.emplace(options(), host);
    in = PipelineAccess::add_host(*p, input.data, items, sizeof(std::uint32_t), SpanRole::input, std::move(input.owner));
    generation = PipelineAccess::generation(*p);
    const auto y = p->output(out.as<std::uint32_t>());
    const std::size_t x = in;
    p->compute(
        [x, y](const Chunk& c) {
          const auto* from = static_cast<const std::uint32_t*>(c.slots[x].data);
          const auto to = c[y];
          for (std::size_t i = 0; i < c.size(); ++i) to[i] = from[i] + 1;
        },
        replay);
  }
  bool right(std::uint32_t first) const {
    const auto v = out.as<std::uint32_t>();
    for (std::size_t i = 0; i < items; ++i)
      if (v[i] != first + static_cast<std::uint32_t>(i) + 1) return false;
    return true;
  }
};

class OwnedMemoryTest : public ::testing::Test {
 protected:
  HostExecutor host;
  Releases releases;
};

}  // namespace

TEST_F(OwnedMemoryTest, ThePipelineKeepsItLockedBetweenRunsAndUnlocksItBeforeItsEnd) {
  {
    OwnedPipeline op(host, make_owned(host, releases, 10));
    for (int run = 0; run < 3; ++run) {
      op.p->run();
      ASSERT_TRUE(op.right(10)) << "run " << run;
    }
    EXPECT_EQ(host.holdings().locked_ranges, 1u) << "owned memory stays page-locked between runs";
  }
  EXPECT_EQ(releases.count.load(), 1);
  EXPECT_EQ(releases.locked_at_release.load(), 0u) << "the memory was still page-locked when its owner went";
}

TEST_F(OwnedMemoryTest, ClearSpansUnlocksBeforeLettingGo) {
  OwnedPipeline op(host, make_owned(host, releases, 20));
  op.p->run();
  op.p->run();
  op.p->clear_spans();
  EXPECT_EQ(releases.count.load(), 1);
  EXPECT_EQ(releases.locked_at_release.load(), 0u);
}

TEST_F(OwnedMemoryTest, ARebindUnlocksTheOldMemoryBeforeLettingGo) {
  OwnedPipeline op(host, make_owned(host, releases, 30));
  op.p->run();
  op.p->run();
  Owned next = make_owned(host, releases, 40);
  PipelineAccess::rebind_host(*op.p, op.in, op.generation, next.data, items, false, std::move(next.owner));
  EXPECT_EQ(releases.count.load(), 1);
  EXPECT_EQ(releases.locked_at_release.load(), 0u);
  op.p->run();
  op.p->run();
  EXPECT_TRUE(op.right(40));
  op.p.reset();
  EXPECT_EQ(releases.count.load(), 2);
  EXPECT_EQ(releases.locked_at_release.load(), 0u);
}

// The page-locking after the first run happens in the background: a
// pipeline that ends at once waits for it and undoes it.
TEST_F(OwnedMemoryTest, APipelineThatEndsWhileItLocksInTheBackground) {
  for (int round = 0; round < 20; ++round) {
    OwnedPipeline op(host, make_owned(host, releases, 50));
    op.p->run();
  }
  EXPECT_EQ(releases.count.load(), 20);
  EXPECT_EQ(releases.locked_at_release.load(), 0u);
  EXPECT_EQ(host.holdings().locked_ranges, 0u);
}

// A replay refused (the host executor replays nothing) after the span was
// locked for it, and a run that failed: the lock ends with the pipeline.
TEST_F(OwnedMemoryTest, RefusedAndFailedRunsLeaveNothingLocked) {
  {
    OwnedPipeline op(host, make_owned(host, releases, 60), Replay::graph);
    EXPECT_THROW(op.p->run(), std::invalid_argument);
  }
  {
    OwnedPipeline op(host, make_owned(host, releases, 70));
    op.p->run();
    op.p->run();
    host.inject({sluice::InjectedFault::Kind::execution, {3, sluice::Stage::compute}});
    EXPECT_ANY_THROW(op.p->run());
  }
  EXPECT_EQ(releases.count.load(), 2);
  EXPECT_EQ(releases.locked_at_release.load(), 0u);
  EXPECT_EQ(host.holdings().locked_ranges, 0u);
}

// A submission keeps the pipeline's state alive: the pipeline may go first,
// and the owner goes, unlocked, once the run is waited for.
TEST_F(OwnedMemoryTest, APipelineDestroyedWithARunInFlight) {
  std::optional<sluice::Submission> in_flight;
  {
    OwnedPipeline op(host, make_owned(host, releases, 80));
    op.p->run();
    in_flight.emplace(op.p->submit());
    op.p.reset();
    EXPECT_EQ(releases.count.load(), 0) << "the run in flight still holds the memory";
    in_flight->wait();
  }
  in_flight.reset();
  EXPECT_EQ(releases.count.load(), 1);
  EXPECT_EQ(releases.locked_at_release.load(), 0u);
}

// ---------------------------------------------------------------------------
// Page-locking takes whole pages, and the first and last pages of an array
// that is not page-aligned hold other memory too. Only the whole pages
// inside the array are locked; the sub-page ends travel through a pinned
// buffer of the lock's own, and every byte still arrives.

namespace {

constexpr std::size_t page = 4096;

// Six pages, page-aligned, with an array of four pages' bytes starting 100
// bytes in: its first and last pages hold neighbours' bytes.
struct Neighbourhood {
  std::byte* base = static_cast<std::byte*>(std::aligned_alloc(page, 6 * page));
  static constexpr std::size_t offset = 100;
  static constexpr std::size_t n = 4 * page / sizeof(std::uint32_t);
  ~Neighbourhood() { std::free(base); }
  std::uint32_t* array() const { return reinterpret_cast<std::uint32_t*>(base + offset); }
  const std::byte* before() const { return base + offset / 2; }             // in the array's first page
  const std::byte* after() const { return base + offset + 4 * page + 10; }  // in its last page
  const std::byte* inside() const { return base + 2 * page; }
};

// An owner that does not free: the neighbourhood does.
std::shared_ptr<const void> held(const void* p) { return {p, [](const void*) {}}; }

PipelineOptions edge_options(std::size_t chunk_items, HostMemoryPolicy policy = HostMemoryPolicy::automatic) {
  PipelineOptions o;
  o.host_memory = policy;
  o.chunk_items = chunk_items;
  o.staging_threads = 1;
  return o;
}

}  // namespace

TEST_F(OwnedMemoryTest, OnlyTheWholePagesInsideAnOwnedArrayAreLockedAndItsEndsStillArrive) {
  Neighbourhood hood;
  for (std::size_t i = 0; i < hood.n; ++i) hood.array()[i] = static_cast<std::uint32_t>(i * 7 + 3);
  // Chunks of 256 items (1 KiB): the sub-page head and tail each span several chunks.
  for (const std::size_t chunk_items : {std::size_t{256}, std::size_t{1000}, hood.n}) {
    auto out = host.allocate_pinned(hood.n * sizeof(std::uint32_t));
    Pipeline p(edge_options(chunk_items), host);
    const std::size_t x =
        PipelineAccess::add_host(p, hood.array(), hood.n, sizeof(std::uint32_t), SpanRole::input, held(hood.array()));
    const auto y = p.output(out.as<std::uint32_t>());
    p.compute([x, y](const Chunk& c) {
      const auto* from = static_cast<const std::uint32_t*>(c.slots[x].data);
      for (std::size_t i = 0; i < c.size(); ++i) c[y][i] = from[i] + 1;
    });
    for (int run = 0; run < 3; ++run) {
      std::fill(out.as<std::uint32_t>().begin(), out.as<std::uint32_t>().end(), 0xDEADBEEFu);
      const auto report = p.run();
      for (std::size_t i = 0; i < hood.n; ++i)
        ASSERT_EQ(out.as<std::uint32_t>()[i], i * 7 + 4) << "item " << i << ", run " << run << ", chunks of " << chunk_items;
      if (run > 0) {
        EXPECT_EQ(report.volume.staged_in_bytes, 0.0) << "copied directly once locked (run " << run << ")";
        EXPECT_TRUE(host.page_locked(hood.inside()));
        EXPECT_FALSE(host.page_locked(hood.before())) << "a neighbour's bytes before the array are page-locked";
        EXPECT_FALSE(host.page_locked(hood.after())) << "a neighbour's bytes after the array are page-locked";
      }
    }
  }
  EXPECT_EQ(host.holdings().locked_ranges, 0u);
}

TEST_F(OwnedMemoryTest, TheEndsOfAnOwnedInOutArrayGoBothWays) {
  Neighbourhood hood;
  for (std::size_t i = 0; i < hood.n; ++i) hood.array()[i] = static_cast<std::uint32_t>(i);
  Pipeline p(edge_options(300), host);
  const std::size_t x =
      PipelineAccess::add_host(p, hood.array(), hood.n, sizeof(std::uint32_t), SpanRole::inout, held(hood.array()));
  p.compute([x](const Chunk& c) {
    auto* v = static_cast<std::uint32_t*>(c.slots[x].data);
    for (std::size_t i = 0; i < c.size(); ++i) v[i] = v[i] * 2 + 1;
  });
  std::vector<std::uint32_t> expect(hood.n);
  for (std::size_t i = 0; i < hood.n; ++i) expect[i] = static_cast<std::uint32_t>(i);
  for (int run = 0; run < 4; ++run) {
    p.run();
    for (auto& e : expect) e = e * 2 + 1;
    for (std::size_t i = 0; i < hood.n; ++i) ASSERT_EQ(hood.array()[i], expect[i]) << "item " << i << ", run " << run;
  }
  EXPECT_FALSE(host.page_locked(hood.before()));
  EXPECT_FALSE(host.page_locked(hood.after()));
}

// register_memory locks the caller's memory for the run alone; while it
// runs, the neighbours' bytes stay as they were too.
TEST_F(OwnedMemoryTest, RegisterMemoryLocksOnlyThePagesInsideWhileItRuns) {
  Neighbourhood hood;
  for (std::size_t i = 0; i < hood.n; ++i) hood.array()[i] = static_cast<std::uint32_t>(i + 11);
  auto out = host.allocate_pinned(hood.n * sizeof(std::uint32_t));
  Pipeline p(edge_options(512, HostMemoryPolicy::register_memory), host);
  const auto x = p.input(std::span<const std::uint32_t>(hood.array(), hood.n));
  const auto y = p.output(out.as<std::uint32_t>());
  std::atomic<int> neighbours_locked{0}, inside_locked{0};
  p.compute([&, x, y](const Chunk& c) {
    neighbours_locked += host.page_locked(hood.before()) + host.page_locked(hood.after());
    inside_locked += host.page_locked(hood.inside());
    for (std::size_t i = 0; i < c.size(); ++i) c[y][i] = c[x][i] * 3;
  });
  p.run();
  for (std::size_t i = 0; i < hood.n; ++i) ASSERT_EQ(out.as<std::uint32_t>()[i], (i + 11) * 3) << "item " << i;
  EXPECT_GT(inside_locked.load(), 0) << "the pages inside were page-locked for the run";
  EXPECT_EQ(neighbours_locked.load(), 0) << "the neighbours' bytes were page-locked while the run went";
  EXPECT_EQ(host.holdings().locked_ranges, 0u);
}
