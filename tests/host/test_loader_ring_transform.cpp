// The loader ring's transform (a token loader's widening of uint16 tokens to
// int32 inputs and targets), run on the host executor: it runs on the copy
// lane after the copy and before ready, so the consumer sees it done; with
// ready's edge on it left out, the consumer reads unfinished output. And
// what the idle report and EXPLAIN say of such a ring.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include "loader_ring_test.hpp"

namespace sluice::test {

namespace {

constexpr std::size_t seq = 6;

std::uint16_t token(std::size_t window, std::size_t t) { return static_cast<std::uint16_t>((window * 131 + t * 7 + 1) % 65521); }

// Windows of seq + 1 uint16 tokens, widened as TokenLoader widens them:
// the batch's inputs (batch x seq int32), then its targets.
LoaderSource token_source(std::size_t batch, std::shared_ptr<std::atomic<int>> slow_first = nullptr) {
  LoaderSource s;
  s.row_bytes = (seq + 1) * sizeof(std::uint16_t);
  s.out_row_bytes = 2 * seq * sizeof(std::int32_t);
  s.read_row = [](std::size_t window, std::byte* row) {
    for (std::size_t t = 0; t <= seq; ++t) {
      const std::uint16_t v = token(window, t);
      std::memcpy(row + t * sizeof v, &v, sizeof v);
    }
  };
  s.transform = [batch, slow_first](void* lane, const std::byte* raw, std::byte* out, std::size_t rows) {
    if (lane != nullptr) throw std::logic_error("the host executor's copy lane has no handle");
    // The first batch's transform takes long: a consumer that does not wait for it sees it unfinished.
    if (slow_first && slow_first->fetch_add(1) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t t = 0; t < seq; ++t) {
        std::uint16_t in = 0, next = 0;
        std::memcpy(&in, raw + (r * (seq + 1) + t) * 2, 2);
        std::memcpy(&next, raw + (r * (seq + 1) + t + 1) * 2, 2);
        const std::int32_t wide[2] = {in, next};
        std::memcpy(out + (r * seq + t) * 4, &wide[0], 4);
        std::memcpy(out + ((batch + r) * seq + t) * 4, &wide[1], 4);
      }
  };
  return s;
}

struct TokenRun {
  std::shared_ptr<std::atomic<std::size_t>> wrong = std::make_shared<std::atomic<std::size_t>>(0);
  std::size_t batches = 0;
  std::vector<std::string> violations;
  IdleReport idle;
};

// Takes `count` batches; the consumer's lane checks each one's inputs and
// targets against the windows the plan puts in it. `hold_first`: the lane
// holds the first batch's check until the executor has seen the plan broken.
TokenRun run_tokens(HostRingExecutor& executor, std::size_t windows, std::size_t count, const LoaderSource& source,
                    bool hold_first = false) {
  const LoaderOptions o = loader_options(4, /*shuffle=*/true, /*ahead=*/2);
  const BatchPlan plan = batch_plan(windows, o);
  TokenRun run;
  within(std::chrono::seconds(30), "a token loader ring", [&] {
    LoaderRing ring(plan, source, executor, o);
    for (std::size_t b = 0; b < count; ++b) {
      const auto t = ring.next();
      std::vector<std::size_t> items;
      for (std::size_t r = 0; r < t.rows; ++r) items.push_back(plan.item(t.position, r));
      executor.on_consumer([&executor, t, items, wrong = run.wrong, hold = hold_first && b == 0, batch = o.batch] {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (hold && executor.violations().empty() && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        for (std::size_t r = 0; r < items.size(); ++r)
          for (std::size_t k = 0; k < seq; ++k) {
            std::int32_t in = 0, target = 0;
            std::memcpy(&in, t.data + (r * seq + k) * 4, 4);
            std::memcpy(&target, t.data + ((batch + r) * seq + k) * 4, 4);
            *wrong += (in != token(items[r], k)) + (target != token(items[r], k + 1));
          }
      });
    }
    run.batches = count;
    run.idle = ring.idle();
  });
  run.violations = executor.violations();
  return run;
}

bool any_names(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines)
    if (l.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

class LoaderRingTransform : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(LoaderRingTransform, TheConsumerSeesEveryBatchWidened) {
  HostRingExecutor executor({.jitter_us = 150, .seed = GetParam()});
  const TokenRun run = run_tokens(executor, 18, 12, token_source(4));  // 5 batches an epoch, the last of 2 rows
  EXPECT_EQ(*run.wrong, 0u);
  EXPECT_TRUE(run.violations.empty()) << run.violations.front();
  expect_nothing_held(executor);
}

INSTANTIATE_TEST_SUITE_P(Seeds, LoaderRingTransform, ::testing::Range<std::uint64_t>(1, 5));

TEST(LoaderRingTransform, WithReadysEdgeOnTheTransformLeftOutTheConsumerReadsUnfinishedOutput) {
  HostRingExecutor executor;
  executor.ignore_edges([](const RingOp&, const RingEdge& e) { return e.on.step != Step::transform; });
  const TokenRun run = run_tokens(executor, 18, 3, token_source(4, std::make_shared<std::atomic<int>>(0)), true);
  EXPECT_TRUE(any_names(run.violations, "position 0 ready: starts before the transform of position 0 (data)"))
      << (run.violations.empty() ? "none" : run.violations.front());
  EXPECT_GT(*run.wrong, 0u) << "the consumer read the first batch widened";
}

TEST(LoaderRingTransform, KeptTheSameSlowTransformIsWaitedFor) {
  HostRingExecutor executor;
  const TokenRun run = run_tokens(executor, 18, 3, token_source(4, std::make_shared<std::atomic<int>>(0)));
  EXPECT_EQ(*run.wrong, 0u);
  EXPECT_TRUE(run.violations.empty()) << run.violations.front();
}

TEST(LoaderRingTransform, ExplainShowsTheTransformBetweenCopyAndReady) {
  HostRingExecutor executor;
  const LoaderOptions o = loader_options(4, false, 2);
  LoaderRing ring(batch_plan(18, o), token_source(4), executor, o);
  const std::string plan = explain(ring.ring_plan(), 1);
  const std::size_t copy = plan.find("0 copy"), transform = plan.find("0 transform copy      device[0] -> its out"),
                    ready = plan.find("0 ready");
  ASSERT_NE(transform, std::string::npos) << plan;
  EXPECT_LT(copy, transform) << plan;
  EXPECT_LT(transform, ready) << plan;
  EXPECT_NE(plan.find("after copy 0 (data)", transform), std::string::npos) << plan;
  EXPECT_NE(plan.find("after transform 0 (data)", ready), std::string::npos) << plan;
  EXPECT_NE(plan.find("a transform into 192 bytes at offset 256"), std::string::npos) << plan;
}

TEST(LoaderRingTransform, TheIdleReportCountsTheBatchesTaken) {
  HostRingExecutor executor({.jitter_us = 100});
  const TokenRun run = run_tokens(executor, 18, 7, token_source(4));
  EXPECT_EQ(run.idle.steps, 7u);
  EXPECT_GE(run.idle.fill_ms, 0.0);
  EXPECT_GE(run.idle.waited_ms, 0.0);
  EXPECT_GE(run.idle.loop_ms, 0.0);
}

}  // namespace sluice::test
