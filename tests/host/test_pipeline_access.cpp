// The untyped entry points (PipelineAccess, what the Python module uses)
// check a span's handle as the typed rebind() does: the handle's own
// generation and the writability its span needs. (rebind_host once passed
// the pipeline's current generation, so a handle of another pipeline, or one
// from before clear_spans(), re-pointed whichever span had its index, and an
// output could be pointed at memory bound as read-only.)
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "pipeline/pipeline_access.hpp"
#include "sluice/pipeline/host_executor.hpp"
#include "sluice/pipeline/pipeline.hpp"

using sluice::Chunk;
using sluice::HostExecutor;
using sluice::Pipeline;
using sluice::PipelineOptions;
using sluice::SpanRole;
using sluice::detail::PipelineAccess;

namespace {

constexpr std::size_t items = 4096;

PipelineOptions options() {
  PipelineOptions o;
  o.chunk_items = items / 4;
  o.staging_threads = 1;
  return o;
}

// A pipeline of out = in + 1 over two untyped spans (0: input, 1: output).
struct AddOne {
  std::vector<std::int32_t> in = std::vector<std::int32_t>(items), out = std::vector<std::int32_t>(items, -1);
  Pipeline p;
  std::uint64_t generation;
  explicit AddOne(HostExecutor& host, std::int32_t first) : p(options(), host) {
    for (std::size_t i = 0; i < items; ++i) in[i] = first + static_cast<std::int32_t>(i);
    PipelineAccess::add_host(p, in.data(), items, sizeof(std::int32_t), SpanRole::input);
    PipelineAccess::add_host(p, out.data(), items, sizeof(std::int32_t), SpanRole::output);
    generation = PipelineAccess::generation(p);
    p.compute([](const Chunk& c) {
      const auto* x = static_cast<const std::int32_t*>(c.slots[0].data);
      auto* y = static_cast<std::int32_t*>(c.slots[1].data);
      for (std::size_t i = 0; i < c.size(); ++i) y[i] = x[i] + 1;
    });
  }
  bool right() const {
    for (std::size_t i = 0; i < items; ++i)
      if (out[i] != in[i] + 1) return false;
    return true;
  }
};

TEST(PipelineAccessTest, RebindWithTheSpansOwnGenerationRepointsIt) {
  HostExecutor host;
  AddOne a(host, 10);
  a.p.run();
  std::vector<std::int32_t> other(items, 1000);
  PipelineAccess::rebind_host(a.p, 0, a.generation, other.data(), items, false);
  a.p.run();
  EXPECT_EQ(a.out[0], 1001);
  EXPECT_EQ(a.out[items - 1], 1001);
}

TEST(PipelineAccessTest, RefusesAHandleOfAnotherPipeline) {
  HostExecutor host;
  AddOne a(host, 10), b(host, 20);
  std::vector<std::int32_t> other(items, 1000);
  EXPECT_THROW(PipelineAccess::rebind_host(a.p, 0, b.generation, other.data(), items, false), std::logic_error);
  a.p.run();
  EXPECT_TRUE(a.right()) << "the refused rebind moved the span: out[0] is " << a.out[0];
}

TEST(PipelineAccessTest, RefusesAHandleFromBeforeClearSpans) {
  HostExecutor host;
  AddOne a(host, 10);
  const std::uint64_t stale = a.generation;
  a.p.clear_spans();
  std::vector<std::int32_t> in(items, 5), out(items, -1), other(items, 1000);
  PipelineAccess::add_host(a.p, in.data(), items, sizeof(std::int32_t), SpanRole::input);
  PipelineAccess::add_host(a.p, out.data(), items, sizeof(std::int32_t), SpanRole::output);
  a.p.compute([](const Chunk& c) {
    const auto* x = static_cast<const std::int32_t*>(c.slots[0].data);
    auto* y = static_cast<std::int32_t*>(c.slots[1].data);
    for (std::size_t i = 0; i < c.size(); ++i) y[i] = x[i] + 1;
  });
  EXPECT_NE(stale, PipelineAccess::generation(a.p));
  EXPECT_THROW(PipelineAccess::rebind_host(a.p, 0, stale, other.data(), items, false), std::logic_error);
  a.p.run();
  EXPECT_EQ(out[0], 6);
  EXPECT_EQ(out[items - 1], 6);
}

TEST(PipelineAccessTest, RefusesReadOnlyMemoryForAnOutput) {
  HostExecutor host;
  AddOne a(host, 10);
  std::vector<std::int32_t> other(items, -7);
  EXPECT_THROW(PipelineAccess::rebind_host(a.p, 1, a.generation, other.data(), items, false), std::logic_error);
  a.p.run();
  EXPECT_TRUE(a.right());
  EXPECT_EQ(other[0], -7);
}

}  // namespace
