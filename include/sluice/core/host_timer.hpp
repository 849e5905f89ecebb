#pragma once
// Steady-clock timing for host-side work (memcpy, registration, API call
// costs): warm-up first, one sample in milliseconds per repeat. Host-only.
#include <chrono>
#include <vector>

namespace sluice {

template <typename Work>
std::vector<double> time_on_host(int warmup, int repeats, Work&& work) {
  for (int i = 0; i < warmup; ++i) work();
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(repeats));
  for (int i = 0; i < repeats; ++i) {
    const auto begin = std::chrono::steady_clock::now();
    work();
    const auto end = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double, std::milli>(end - begin).count());
  }
  return samples;
}

}  // namespace sluice
