#pragma once
// The benchmark workloads: each reads one or two float arrays and writes one,
// on data that is never all zeros, with a CPU reference to verify against.
//   sincosN  y = f^N(x), f(v) = sin(v) * cos(v)   compute-heavy, N = 20..200
//   vadd     c = a + b                            memory-light, copy-bound
//   copy     y = x (a device-side copy)           pure copy-through
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "sluice/core/pinned_buffer.hpp"
#include "sluice/core/stream_view.hpp"

namespace sluice::workloads {

struct Workload {
  enum class Kind { sincos, vector_add, copy };
  Kind kind = Kind::copy;
  int iterations = 0;  // sincos only
  std::string name() const;
  std::size_t input_count() const { return kind == Kind::vector_add ? 2 : 1; }
  // The kernel over n items of device arrays (inputs, then the output).
  void launch(StreamView stream, const float* const* inputs, float* output, std::size_t n) const;
};

// "sincos20", "vadd", "copy"; throws std::invalid_argument naming the choices.
Workload parse_workload(const std::string& name);

struct Verification {
  bool ok = false;
  std::size_t checked = 0;
  std::string detail;  // the first mismatch, when not ok
};

// Host data for one workload and size, in pinned or pageable memory.
class Problem {
 public:
  enum class Memory { pinned, pageable };
  Problem(Workload workload, std::size_t items, Memory memory);

  const Workload& workload() const { return workload_; }
  std::size_t items() const { return items_; }
  Memory memory() const { return memory_; }
  std::span<const float> input(std::size_t k) const;
  std::span<float> output();
  // Array k: the inputs, then the output.
  std::span<float> array(std::size_t k) { return {data(k), items_}; }
  double bytes_moved() const { return static_cast<double>(items_ * sizeof(float) * (workload_.input_count() + 1)); }

  // NaN in every output element, so an element nobody wrote cannot pass.
  void poison_output();
  // Every element written and equal to the CPU reference (sincos: a spread
  // sample against a double-precision reference, the rest checked written).
  Verification verify() const;

 private:
  float* data(std::size_t array);
  const float* data(std::size_t array) const;

  Workload workload_;
  std::size_t items_;
  Memory memory_;
  std::vector<PinnedBuffer<float>> pinned_;  // inputs then output
  std::vector<std::vector<float>> pageable_;
};

}  // namespace sluice::workloads
