// The engine of streamed weights (weights/layer_ring.hpp) on the host
// executor, which checks every edge of the ring: one thread puts and takes,
// and no put ever waits for a take it has yet to make (a case that hung
// would abort under the watchdog); the layers come in their order, forward
// and backward, with their bytes at their offsets, read on the consumer's
// lane slowly enough that a slot refilled before its release would show;
// the slots take (ahead + 1) x the largest block and no more; stop() ends it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ring_test.hpp"
#include "weights/layer_order.hpp"
#include "weights/layer_ring.hpp"

namespace sluice::test {

namespace {

using weights::LayerOrder;
using weights::LayerRing;

constexpr auto limit = std::chrono::seconds(60);

// Piece i of layer k holds item k * 7 + i's bytes (ring_test.hpp), so that a
// byte of another layer, piece or offset shows.
struct Layers {
  std::vector<std::vector<std::vector<std::byte>>> bytes;  // [layer][piece]
  explicit Layers(const std::vector<std::vector<std::size_t>>& sizes) {
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      bytes.emplace_back();
      for (std::size_t i = 0; i < sizes[k].size(); ++i) {
        bytes[k].emplace_back(sizes[k][i]);
        fill_item(k * 7 + i, bytes[k][i]);
      }
    }
  }
  std::vector<std::vector<BatchPiece>> pieces() const {
    std::vector<std::vector<BatchPiece>> out;
    for (const auto& layer : bytes) {
      out.emplace_back();
      for (const auto& piece : layer) out.back().push_back({piece.data(), piece.size(), true});
    }
    return out;
  }
  // Bytes of a taken block that are not its layer's.
  std::size_t wrong_in(const LayerRing::Taken& t) const {
    std::size_t wrong = 0;
    const std::size_t k = t.step.layer;
    for (std::size_t i = 0; i < bytes[k].size(); ++i)
      wrong += wrong_bytes(t.data + t.layout->offsets[i], bytes[k][i].size(), k * 7 + i);
    return wrong;
  }
};

LayerRing make_ring(ring::RingExecutor& executor, const Layers& layers, bool backward, std::size_t ahead) {
  auto pieces = layers.pieces();
  auto layouts = weights::lay_out_layers(pieces);
  return LayerRing(executor, std::move(pieces), std::move(layouts), LayerOrder(layers.bytes.size(), backward), ahead);
}

// Four layers of different sizes; the largest, layer 2, lays out as 0, 1024,
// 1280 + 300 = a block of 1580 bytes.
const std::vector<std::vector<std::size_t>> four{{100, 17}, {700, 1, 33}, {1000, 17, 300}, {5}};
constexpr std::size_t largest_block = 1580;

}  // namespace

class LayerRingJitter : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(LayerRingJitter, OneThreadTakesEveryLayerInItsOrderWithItsBytes) {
  HostRingExecutor executor({.jitter_us = 60, .seed = GetParam()});
  const Layers layers(four);
  const std::size_t ahead = 1 + GetParam() % 3;
  std::vector<std::size_t> order, passes;
  std::vector<bool> backward;
  std::atomic<std::size_t> wrong{0}, checked{0};
  within(limit, "three passes of four layers", [&] {
    LayerRing ring = make_ring(executor, layers, true, ahead);
    for (std::size_t p = 0; p < 24; ++p) {
      const LayerRing::Taken t = ring.next({});
      EXPECT_EQ(t.position, p);
      order.push_back(t.step.layer);
      passes.push_back(t.step.pass);
      backward.push_back(t.step.backward);
      // Read on the consumer's lane, as kernels would, twice with a pause:
      // a slot refilled while its layer computes shows.
      executor.on_consumer([t, &layers, &wrong, &checked] {
        std::size_t bad = layers.wrong_in(t);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        wrong += bad + layers.wrong_in(t);
        ++checked;
      });
    }
  });
  EXPECT_EQ(order, (std::vector<std::size_t>{0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(passes, (std::vector<std::size_t>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2}));
  EXPECT_EQ(backward, (std::vector<bool>{0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(checked.load(), 24u);
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
  expect_nothing_held(executor);
}
INSTANTIATE_TEST_SUITE_P(Seeds, LayerRingJitter, ::testing::Range<std::uint64_t>(1, 7));

TEST(LayerRing, ASlowLayerKeepsItsSlotUntilItsKernelsAreDone) {
  // ahead 1: two slots, so position 2's copy goes into position 0's slot,
  // and must wait on the lane for the slow work on position 0.
  HostRingExecutor executor({.jitter_us = 0, .seed = 1});
  const Layers layers({{4096}, {4096}, {4096}});
  std::atomic<std::size_t> wrong{0};
  within(limit, "a slow layer", [&] {
    LayerRing ring = make_ring(executor, layers, false, 1);
    for (std::size_t p = 0; p < 6; ++p) {
      const LayerRing::Taken t = ring.next({});
      executor.on_consumer([t, &layers, &wrong, slow = p % 3 == 0] {
        if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        wrong += layers.wrong_in(t);
      });
    }
  });
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_TRUE(executor.violations().empty()) << first_violation(executor);
}

TEST(LayerRing, TheSlotsHoldAheadPlusOneOfTheLargestBlock) {
  HostRingExecutor executor;
  const Layers layers(four);
  within(limit, "the slots' size", [&] {
    LayerRing ring = make_ring(executor, layers, false, 2);
    EXPECT_EQ(ring.block_bytes(), largest_block);
    EXPECT_EQ(ring.slots(), 3u);
    for (std::size_t p = 0; p < 9; ++p) {
      (void)ring.next({});
      // Every slot was given the largest block by its first copy, whatever layer came first.
      EXPECT_EQ(executor.holdings().device_bytes, 3 * largest_block) << "after position " << p;
    }
  });
}

TEST(LayerRing, NextAfterStopIsRefusedAndNothingIsLeftRunning) {
  HostRingExecutor executor({.jitter_us = 30, .seed = 3});
  const Layers layers(four);
  within(limit, "a stopped ring", [&] {
    LayerRing ring = make_ring(executor, layers, true, 2);
    (void)ring.next({});
    (void)ring.next({});
    ring.stop();
    ring.stop();  // idempotent
    EXPECT_THROW((void)ring.next({}), std::logic_error);
  });
  expect_nothing_held(executor);
}

TEST(LayerRing, AheadZeroIsRefused) {
  HostRingExecutor executor;
  const Layers layers(four);
  EXPECT_THROW((void)make_ring(executor, layers, false, 0), std::invalid_argument);
}

}  // namespace sluice::test
