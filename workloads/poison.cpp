#include "poison.hpp"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace sluice::workloads {

void fill_with_nan(std::span<float> out) {
  constexpr std::size_t per_thread = std::size_t{64} << 20;  // bytes below which one thread is as fast
  const std::size_t threads = std::clamp<std::size_t>(out.size_bytes() / per_thread, 1, 8);
  const float nan = std::nanf("");
  if (threads == 1) {
    std::fill(out.begin(), out.end(), nan);
    return;
  }
  const std::size_t share = (out.size() + threads - 1) / threads;
  std::vector<std::jthread> workers;
  for (std::size_t t = 0; t < threads; ++t) {
    const std::size_t begin = std::min(out.size(), t * share), end = std::min(out.size(), begin + share);
    workers.emplace_back([=] { std::fill(out.begin() + begin, out.begin() + end, nan); });
  }
}

}  // namespace sluice::workloads
