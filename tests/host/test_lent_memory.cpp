// Memory the caller lends stays the caller's: nothing of it is page-locked
// once a run has returned, so memory freed and handed out again at the same
// addresses is never taken for page-locked memory. (A pipeline that kept
// std::vectors registered after they were freed made a second pipeline copy
// new vectors at those addresses directly: on a GPU, from the pages that
// were registered, not the ones the new vectors live in; every output was
// wrong.)
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "run_probes.hpp"
#include "sluice/pipeline/host_executor.hpp"
#include "sluice/pipeline/pipeline.hpp"

using sluice::Chunk;
using sluice::HostExecutor;
using sluice::HostMemoryPolicy;
using sluice::Pipeline;
using sluice::PipelineOptions;
using sluice::RunReport;
using namespace sluice::test;

namespace {

constexpr std::uint32_t poison = 0xDEADBEEE;
constexpr std::size_t items = std::size_t{1} << 16;
// Vectors that are freed and made anew: 40 MiB each, past the largest
// threshold above which malloc always maps memory of its own (32 MiB), so a
// freed vector's pages go back and the next vector of that size is most
// likely mapped at the same address.
constexpr std::size_t freed_items = std::size_t{10} << 20;

std::uint32_t input_at(std::size_t i) { return static_cast<std::uint32_t>(item_value(7, i)); }

PipelineOptions options(HostMemoryPolicy policy, std::size_t n = items) {
  PipelineOptions o;
  o.host_memory = policy;
  o.chunk_items = n / 8;
  o.staging_threads = 1;
  return o;
}

// out = 3 in + 1 over the pipeline's spans.
void triple(Pipeline& p, sluice::SpanHandle<const std::uint32_t> x, sluice::SpanHandle<std::uint32_t> y) {
  p.compute([x, y](const Chunk& c) {
    const auto in = c[x];
    const auto out = c[y];
    for (std::size_t i = 0; i < c.size(); ++i) out[i] = in[i] * 3 + 1;
  });
}

::testing::AssertionResult tripled(const std::vector<std::uint32_t>& in, const std::vector<std::uint32_t>& out) {
  for (std::size_t i = 0; i < in.size(); ++i)
    if (out[i] != in[i] * 3 + 1) return ::testing::AssertionFailure() << "item " << i << " is " << out[i];
  return ::testing::AssertionSuccess();
}

std::vector<std::uint32_t> inputs(std::size_t n = items) {
  std::vector<std::uint32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = input_at(i);
  return v;
}

bool staged_both_ways(const RunReport& r) { return r.volume.staged_in_bytes > 0 && r.volume.staged_out_bytes > 0; }

}  // namespace

TEST(LentMemory, VectorsFreedUnderALivePipelineLeaveNothingLockedForTheNextOnes) {
  HostExecutor host;
  Pipeline first(options(HostMemoryPolicy::automatic, freed_items), host);
  const void* old_in = nullptr;
  const void* old_out = nullptr;
  {
    std::vector<std::uint32_t> a = inputs(freed_items), b(freed_items, poison);
    triple(first, first.input(a), first.output(b));
    const RunReport one = first.run();
    const RunReport two = first.run();  // a pipeline that locked lent memory between runs had done so by now
    EXPECT_TRUE(tripled(a, b));
    EXPECT_TRUE(staged_both_ways(one));
    EXPECT_TRUE(staged_both_ways(two)) << "lent memory was page-locked between runs";
    EXPECT_EQ(host.holdings().locked_ranges, 0u);
    old_in = a.data();
    old_out = b.data();
  }  // the vectors go; `first` lives on

  EXPECT_EQ(host.holdings().locked_ranges, 0u) << "memory freed by its owner is still page-locked";
  std::vector<std::uint32_t> c = inputs(freed_items), d(freed_items, poison);
  const bool same_addresses = c.data() == old_in || d.data() == old_out;
  Pipeline second(options(HostMemoryPolicy::automatic, freed_items), host);
  triple(second, second.input(c), second.output(d));
  const RunReport report = second.run();
  EXPECT_TRUE(tripled(c, d));
  EXPECT_TRUE(staged_both_ways(report)) << "new vectors " << (same_addresses ? "at the freed ones' addresses " : "")
                                        << "were copied as if page-locked";
  RecordProperty("new_vectors_at_old_addresses", same_addresses ? "yes" : "no");
  std::printf("new vectors at the freed ones' addresses: %s\n", same_addresses ? "yes" : "no");
}

TEST(LentMemory, RegisterPolicyLocksForTheRunOnlyEvenWhenItFails) {
  HostExecutor host;
  std::vector<std::uint32_t> a = inputs(), b(items, poison);
  Pipeline p(options(HostMemoryPolicy::register_memory), host);
  const auto x = p.input(a);
  const auto y = p.output(b);
  bool fail = true;
  p.compute([&, x, y](const Chunk& c) {
    EXPECT_GE(host.holdings().locked_ranges, 1u) << "the spans are not page-locked while the run goes";
    if (fail && c.index == 3) throw std::runtime_error("chunk 3 gave up");
    for (std::size_t i = 0; i < c.size(); ++i) c[y][i] = c[x][i] * 3 + 1;
  });
  try {
    p.run();
    ADD_FAILURE() << "the compute's failure was lost";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("chunk 3 gave up"), std::string::npos) << e.what();
  }
  EXPECT_EQ(host.holdings().locked_ranges, 0u) << "a failed run left its spans page-locked";
  fail = false;
  const RunReport report = p.run();
  EXPECT_TRUE(tripled(a, b));
  EXPECT_EQ(report.volume.staged_in_bytes, 0.0);  // copied where they are while locked
  EXPECT_EQ(host.holdings().locked_ranges, 0u);
}

TEST(LentMemory, ACallersRegistrationIsCopiedDirectlyWhileItLastsAndStagedAfter) {
  HostExecutor host;
  std::vector<std::uint32_t> a = inputs(), b(items, poison);
  Pipeline p(options(HostMemoryPolicy::automatic), host);
  triple(p, p.input(a), p.output(b));
  {
    const auto in_lock = host.register_memory(a.data(), a.size() * sizeof(std::uint32_t));
    const auto out_lock = host.register_memory(b.data(), b.size() * sizeof(std::uint32_t));
    const RunReport direct = p.run();
    EXPECT_TRUE(tripled(a, b));
    EXPECT_EQ(direct.volume.staged_in_bytes, 0.0);
    EXPECT_EQ(direct.volume.staged_out_bytes, 0.0);
  }  // the caller ends its registrations: the pipeline must not go on copying as if they held
  EXPECT_EQ(host.holdings().locked_ranges, 0u);
  std::fill(b.begin(), b.end(), poison);
  const RunReport staged = p.run();
  EXPECT_TRUE(tripled(a, b));
  EXPECT_TRUE(staged_both_ways(staged));
  EXPECT_TRUE(host.violations().empty()) << host.violations().front();
}
