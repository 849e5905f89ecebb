// The host's side of streamed weights (weights/layer_order.hpp): the order of
// the layers forward and forward-then-backward over several passes, each
// layer's block as the ring lays it out, ahead from a budget (exact fits, a
// byte short, capped at a pass), and the checks that refuse bad layers and
// options before any work. Expected values are written out by hand.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "sluice/core/ahead.hpp"
#include "weights/layer_order.hpp"

namespace sluice::test {

namespace {

using weights::LayerOrder;
using weights::LayerStep;

std::vector<LayerStep> first(const LayerOrder& order, std::size_t n) {
  std::vector<LayerStep> steps;
  for (std::size_t p = 0; p < n; ++p) steps.push_back(order.at(p));
  return steps;
}

// What an std::invalid_argument said, or "" where nothing was thrown.
template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// Whether a refusal's message says `part`.
bool says(const std::string& message, const std::string& part) { return message.find(part) != std::string::npos; }

constexpr bool fwd = false, bwd = true;

const std::byte memory[4096]{};
BatchPiece locked(std::size_t bytes) { return {memory, bytes, true}; }

}  // namespace

TEST(LayerOrder, ForwardOnlyTakesTheLayersInOrderPassAfterPass) {
  const LayerOrder order(3, false);
  EXPECT_EQ(order.per_pass(), 3u);
  const std::vector<LayerStep> want{{0, fwd, 0}, {0, fwd, 1}, {0, fwd, 2}, {1, fwd, 0}, {1, fwd, 1},
                                    {1, fwd, 2}, {2, fwd, 0}, {2, fwd, 1}, {2, fwd, 2}, {3, fwd, 0}};
  EXPECT_EQ(first(order, 10), want);
}

TEST(LayerOrder, BackwardTurnsAtTheLastLayerAndComesBackToTheFirst) {
  const LayerOrder order(3, true);
  EXPECT_EQ(order.per_pass(), 6u);
  const std::vector<LayerStep> want{
      {0, fwd, 0}, {0, fwd, 1}, {0, fwd, 2}, {0, bwd, 2}, {0, bwd, 1}, {0, bwd, 0},
      {1, fwd, 0}, {1, fwd, 1}, {1, fwd, 2}, {1, bwd, 2}, {1, bwd, 1}, {1, bwd, 0},
      {2, fwd, 0}, {2, fwd, 1}, {2, fwd, 2}, {2, bwd, 2}, {2, bwd, 1}, {2, bwd, 0},
      {3, fwd, 0}};
  EXPECT_EQ(first(order, 19), want);
  // Far on, the same arithmetic: position 6003 is pass 1000's first backward step.
  EXPECT_EQ(order.at(6003), (LayerStep{1000, bwd, 2}));
}

TEST(LayerOrder, OneLayerIsTakenOncePerHalf) {
  const std::vector<LayerStep> backward{{0, fwd, 0}, {0, bwd, 0}, {1, fwd, 0}, {1, bwd, 0}};
  EXPECT_EQ(first(LayerOrder(1, true), 4), backward);
  const std::vector<LayerStep> forward{{0, fwd, 0}, {1, fwd, 0}, {2, fwd, 0}};
  EXPECT_EQ(first(LayerOrder(1, false), 3), forward);
}

TEST(LayerOrder, NoLayersAreRefused) {
  EXPECT_PRED2(says, refusal([] { (void)LayerOrder(0, false); }), "no layers");
}

TEST(LayerLayout, PiecesLieAtAlignedOffsetsAndEmptyPiecesKeepTheirPlace) {
  const auto layouts = weights::lay_out_layers({{locked(100), locked(300)},
                                                {locked(256), locked(1), {nullptr, 0, false}, locked(10)},
                                                {locked(7)}});
  ASSERT_EQ(layouts.size(), 3u);
  EXPECT_EQ(layouts[0].offsets, (std::vector<std::size_t>{0, 256}));
  EXPECT_EQ(layouts[0].bytes, 556u);
  EXPECT_EQ(layouts[1].offsets, (std::vector<std::size_t>{0, 256, 512, 512}));
  EXPECT_EQ(layouts[1].bytes, 522u);
  EXPECT_EQ(layouts[2].offsets, (std::vector<std::size_t>{0}));
  EXPECT_EQ(layouts[2].bytes, 7u);
}

TEST(LayerLayout, BadLayersAreRefusedNamingTheLayerAndPiece) {
  using Layers = std::vector<std::vector<BatchPiece>>;
  EXPECT_PRED2(says, refusal([] { weights::lay_out_layers({}); }), "no layers");
  EXPECT_PRED2(says, refusal([] { weights::lay_out_layers(Layers{{locked(8)}, {}}); }), "layer 1 has no pieces");
  EXPECT_PRED2(says, refusal([] { weights::lay_out_layers(Layers{{locked(0), {nullptr, 0, true}}}); }),
              "layer 0 has no bytes");
  EXPECT_PRED2(says, refusal([] { weights::lay_out_layers(Layers{{locked(8)}, {locked(8)}, {locked(8), {nullptr, 8, true}}}); }),
              "piece 1 of layer 2 has 8 bytes and no data");
  EXPECT_PRED2(says, refusal([] { weights::lay_out_layers(Layers{{locked(8)}, {{memory, 8, false}}}); }),
              "piece 0 of layer 1 is not marked page_locked");
  EXPECT_PRED2(says, refusal([] { weights::lay_out_layers(Layers{{locked(8), {memory, SIZE_MAX - 8, true}}}); }),
              "layer 0 is too large");
}

TEST(LayerAhead, ABudgetHoldsTheLayerComputingAndAsManyAheadAsFit) {
  // Blocks of 1000 bytes, 6 positions a pass (3 layers, forward and backward).
  auto ahead = [](std::size_t budget) { return weights::choose_ahead({.device_budget = budget}, 1000, 6); };
  EXPECT_EQ(ahead(2000), 1u);  // exactly two slots
  EXPECT_EQ(ahead(2999), 1u);  // a byte short of three
  EXPECT_EQ(ahead(3000), 2u);  // exactly three
  EXPECT_EQ(ahead(5999), 4u);
  EXPECT_EQ(ahead(6000), 5u);  // every position of a pass: the most that helps
  EXPECT_EQ(ahead(7000), 5u);  // capped there
  EXPECT_EQ(ahead(1000000), 5u);
  // A budget sets ahead whatever ahead says.
  EXPECT_EQ(weights::choose_ahead({.ahead = 0, .device_budget = 3000}, 1000, 6), 2u);
  EXPECT_EQ(weights::choose_ahead({.ahead = 4, .device_budget = 3000}, 1000, 6), 2u);
  // One layer forward only: a pass of one position, yet one layer ahead (the next pass's).
  EXPECT_EQ(weights::choose_ahead({.device_budget = 10000}, 1000, 1), 1u);
}

TEST(LayerAhead, WithoutABudgetAheadIsTakenAsGivenUpToAPass) {
  EXPECT_EQ(weights::choose_ahead({}, 1000, 6), 1u);
  EXPECT_EQ(weights::choose_ahead({.ahead = 3}, 1000, 6), 3u);
  EXPECT_EQ(weights::choose_ahead({.ahead = 5}, 1000, 6), 5u);
  EXPECT_EQ(weights::choose_ahead({.ahead = 9}, 1000, 6), 5u);
  EXPECT_EQ(weights::choose_ahead({.ahead = 9}, 1000, 1), 1u);
}

TEST(LayerAhead, AheadZeroAndBudgetsBelowTwoSlotsAreRefused) {
  EXPECT_PRED2(says, refusal([] { weights::choose_ahead({.ahead = 0}, 1000, 6); }), "ahead must be at least 1");
  EXPECT_PRED2(says, refusal([] { weights::choose_ahead({.ahead = most_ahead + 1}, 1000, 100); }),
               "ahead must be at most 30 layers");
  // A budget that holds more slots than the most ahead gets the most ahead.
  EXPECT_EQ(weights::choose_ahead({.device_budget = 100 * 1000}, 1000, 100), most_ahead);
  const std::string short_by_one = refusal([] { weights::choose_ahead({.device_budget = 1999}, 1000, 6); });
  EXPECT_PRED2(says, short_by_one, "device_budget of 1999 bytes");
  EXPECT_PRED2(says, short_by_one, "give at least 2000 bytes");
  EXPECT_PRED2(says, refusal([] { weights::choose_ahead({.device_budget = 0}, 1000, 6); }), "give at least 2000 bytes");
}

}  // namespace sluice::test
