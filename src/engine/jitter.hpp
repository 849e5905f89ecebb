#pragma once
// A host executor's pauses: before each operation, a random 0..most
// microseconds that the seed and the operation decide (whichever thread runs
// it), so that the lanes meet in different orders from seed to seed and a
// failing seed fails again. Host-only.
#include <chrono>
#include <cstdint>
#include <thread>

#include "core/splitmix64.hpp"

namespace sluice::engine {

class Jitter {
 public:
  Jitter(unsigned most_us, std::uint64_t seed) : most_us_(most_us), seed_(seed) {}
  // `key` names the pause: an operation's index, and whatever else tells its runs apart.
  void pause(std::uint64_t key) const {
    if (most_us_ == 0) return;
    const auto us = detail::splitmix64(seed_ * 0x100000001b3ull ^ key) % (most_us_ + 1);
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }

 private:
  unsigned most_us_;
  std::uint64_t seed_;
};

}  // namespace sluice::engine
