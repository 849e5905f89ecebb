// The multi-part pipeline over host executors of their own, jittered
// differently: every part runs on its own executor, a part dealt no items
// is left out, and a part that fails fails the run while the others finish.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline_test.hpp"
#include "sluice/multigpu/multi_pipeline.hpp"
#include "sluice/pipeline/host_executor.hpp"

namespace sluice::test {

namespace {

std::vector<HostExecutor> jittered_executors(std::size_t parts) {
  std::vector<HostExecutor> executors;
  for (std::size_t k = 0; k < parts; ++k)
    executors.emplace_back(HostExecutorOptions{.jitter_us = static_cast<unsigned>(20 * k), .seed = 7 + k});
  return executors;
}

void expect_clean(const std::vector<HostExecutor>& executors) {
  for (std::size_t k = 0; k < executors.size(); ++k) {
    EXPECT_TRUE(executors[k].violations().empty()) << "part " << k << " saw the schedule broken";
    const HostExecutor::Holdings h = executors[k].holdings();
    EXPECT_EQ(h.device_bytes + h.pinned_bytes + h.locked_ranges + h.lane_threads, 0u) << "part " << k << " left memory or threads";
  }
}

PipelineOptions small_chunks() {
  PipelineOptions o;
  o.chunk_items = 3000;
  o.depth = 3;
  return o;
}

}  // namespace

TEST(MultiPipelineOnHost, EveryPartRunsOnItsOwnExecutor) {
  const auto executors = jittered_executors(3);
  const std::size_t n = 100'003;
  const auto in = pattern(n);
  auto data = in;  // in place, beside a separate output
  std::vector<float> out(n);
  {
    MultiPipeline p = MultiPipeline::on_host(executors, small_chunks());
    const auto x = p.input(in);
    const auto y = p.output(out);
    const auto z = p.inout(data);
    p.compute([x, y, z](const Chunk& c, std::size_t) {
      for (std::size_t i = 0; i < c.size(); ++i) {
        c[y][i] = c[x][i] * 2 + 1;
        c[z][i] = c[z][i] * 2 + 1;
      }
    });
    for (int run = 0; run < 3; ++run) {
      std::fill(out.begin(), out.end(), std::nanf(""));
      data = in;
      const MultiReport report = p.run();
      ASSERT_TRUE(is_affine(in, out)) << "run " << run;
      ASSERT_TRUE(is_affine(in, data)) << "run " << run;
      for (const auto& part : report.parts) EXPECT_EQ(part.device, -1);
    }
  }
  for (std::size_t k = 0; k < executors.size(); ++k) EXPECT_GT(executors[k].operations_checked(), 0u) << "part " << k;
  expect_clean(executors);
}

// Parts on one executor see its pinned memory as pinned: each copies its
// share of the pinned spans directly, the copies cut at the share's ends.
TEST(MultiPipelineOnHost, PartsOnOneExecutorCopyItsPinnedMemoryDirectly) {
  HostExecutor host(HostExecutorOptions{.jitter_us = 10, .seed = 3});
  const auto values = pattern(70'001);
  {
    HostExecutor::Buffer in = host.allocate_pinned(values.size() * sizeof(float));
    HostExecutor::Buffer out = host.allocate_pinned(values.size() * sizeof(float));
    std::copy(values.begin(), values.end(), in.as<float>().begin());
    std::fill(out.as<float>().begin(), out.as<float>().end(), std::nanf(""));
    MultiPipeline p = MultiPipeline::on_host({host, host, host}, small_chunks());
    const auto x = p.input(std::span<const float>(in.as<float>()));
    const auto y = p.output(out.as<float>());
    p.compute([x, y](const Chunk& c, std::size_t) {
      for (std::size_t i = 0; i < c.size(); ++i) c[y][i] = c[x][i] * 2 + 1;
    });
    const MultiReport report = p.run();
    EXPECT_TRUE(is_affine(values, out.as<float>()));
    for (const auto& part : report.parts) {
      EXPECT_GT(part.items.size(), 0u);
      EXPECT_EQ(part.report.volume.staged_in_bytes + part.report.volume.staged_out_bytes, 0.0);
    }
  }
  expect_clean({host});
}

TEST(MultiPipelineOnHost, APartDealtNoItemsIsLeftOut) {
  const auto executors = jittered_executors(3);
  const auto in = pattern(50'000);
  std::vector<float> out(in.size(), std::nanf(""));
  {
    MultiPipeline p = MultiPipeline::on_host(executors, small_chunks());
    const auto x = p.input(in);
    const auto y = p.output(out);
    p.compute([x, y](const Chunk& c, std::size_t part) {
      if (part == 1) throw std::logic_error("part 1 was dealt no items, yet computes");
      for (std::size_t i = 0; i < c.size(); ++i) c[y][i] = c[x][i] * 2 + 1;
    });
    p.set_weights({1, 0, 1});
    const MultiReport report = p.run();
    EXPECT_EQ(report.parts[1].items.size(), 0u);
    EXPECT_EQ(report.parts[0].items.size() + report.parts[2].items.size(), in.size());
    EXPECT_TRUE(is_affine(in, out));
  }
  EXPECT_EQ(executors[1].operations_checked(), 0u);
  expect_clean(executors);
}

TEST(MultiPipelineOnHost, AFailingPartFailsTheRunWhileTheOthersFinish) {
  const auto executors = jittered_executors(3);
  // Three shares of eight whole granules (4096 items: deal_items) each.
  constexpr std::size_t third = 8 * 4096;
  const auto in = pattern(3 * third);
  std::vector<float> out(in.size(), std::nanf(""));
  {
    MultiPipeline p = MultiPipeline::on_host(executors, small_chunks());
    const auto x = p.input(in);
    const auto y = p.output(out);
    auto affine = [x, y](const Chunk& c) {
      for (std::size_t i = 0; i < c.size(); ++i) c[y][i] = c[x][i] * 2 + 1;
    };
    p.compute([affine](const Chunk& c, std::size_t part) {
      if (part == 1 && c.index == 2) throw std::runtime_error("part 1 gave up");
      affine(c);
    });
    try {
      p.run();
      FAIL() << "a part's failure was lost";
    } catch (const std::runtime_error& e) {
      // Part 1's own error, named with its chunk and stage, and nested as it was.
      EXPECT_EQ(std::string(e.what()).rfind("the compute callable threw at chunk 2 of ", 0), 0u) << e.what();
      try {
        std::rethrow_if_nested(e);
        ADD_FAILURE() << "nothing nested in: " << e.what();
      } catch (const std::runtime_error& own) {
        EXPECT_STREQ(own.what(), "part 1 gave up");
      }
    }
    // Parts 0 and 2 finished all of their thirds. (Part 1's chunks before
    // its failure may or may not have reached the host by then.)
    const std::vector<float> first(in.begin(), in.begin() + third), last(in.end() - third, in.end());
    EXPECT_TRUE(is_affine(first, std::vector<float>(out.begin(), out.begin() + third)));
    EXPECT_TRUE(is_affine(last, std::vector<float>(out.end() - third, out.end())));
    // The same parts run again, with a callable that does not fail.
    p.compute([affine](const Chunk& c, std::size_t) { affine(c); });
    std::fill(out.begin(), out.end(), std::nanf(""));
    p.run();
    EXPECT_TRUE(is_affine(in, out));
  }
  expect_clean(executors);
}

}  // namespace sluice::test

namespace sluice::test {

// A compute given after a run is the one every part calls from the next run on
// (the parts once kept the first callable: x2 replaced by x3 still gave x2).
TEST(MultiPipelineOnHost, AComputeGivenAfterARunIsTheOneTheNextRunCalls) {
  const auto executors = jittered_executors(2);
  const std::size_t n = 20'011;
  const auto in = pattern(n);
  std::vector<float> out(n);
  {
    MultiPipeline p = MultiPipeline::on_host(executors, small_chunks());
    const auto x = p.input(in);
    const auto y = p.output(out);
    auto scale_by = [x, y](float factor) {
      return [x, y, factor](const Chunk& c, std::size_t) {
        for (std::size_t i = 0; i < c.size(); ++i) c[y][i] = c[x][i] * factor;
      };
    };
    p.compute(scale_by(2));
    p.run();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], in[i] * 2) << "item " << i;
    p.compute(scale_by(3));
    std::fill(out.begin(), out.end(), std::nanf(""));
    p.run();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], in[i] * 3) << "item " << i << ": the first callable ran again";
  }
  expect_clean(executors);
}

// Each part sees only its share, so the whole spans are checked before the
// run: an output over another part's input is refused, as one Pipeline
// refuses it. Weights 1:3 over 4 granules of 4096 items deal 4096 and 12288:
// part 0 writes [12288, 16384), inside part 1's input [4096, 16384), while
// neither part's output overlaps its own input, so no part refuses alone.
TEST(MultiPipelineOnHost, AnOutputOverlappingAnotherPartsInputIsRefusedBeforeAnyWork) {
  const auto executors = jittered_executors(2);
  const std::size_t n = 4 * 4096, out_at = 3 * 4096;
  std::vector<float> memory = pattern(out_at + n);
  const std::vector<float> before = memory;
  {
    MultiPipeline p = MultiPipeline::on_host(executors, small_chunks());
    p.set_weights({1, 3});
    const auto x = p.input(std::span<const float>(memory.data(), n));
    const auto y = p.output(std::span<float>(memory.data() + out_at, n));
    p.compute([x, y](const Chunk& c, std::size_t) {
      for (std::size_t i = 0; i < c.size(); ++i) c[y][i] = c[x][i] + 1;
    });
    try {
      p.run();
      FAIL() << "overlapping spans were accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("overlap"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(memory, before) << "a refused run wrote";
  expect_clean(executors);
}

}  // namespace sluice::test
