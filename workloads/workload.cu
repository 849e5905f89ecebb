#include "workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "poison.hpp"
#include "sluice/core/error.hpp"

namespace sluice::workloads {

namespace {

__global__ void sincos_kernel(const float* __restrict__ x, float* __restrict__ y, std::size_t n, int iterations) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    float v = x[i];
    for (int k = 0; k < iterations; ++k) v = sinf(v) * cosf(v);
    y[i] = v;
  }
}

__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                           std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    c[i] = a[i] + b[i];
}

unsigned grid_for(std::size_t n) {
  // Grid-stride loops: enough blocks to fill any current GPU, never more than the work.
  const std::size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
}

// Inputs that are never zero and vary from element to element.
float input_value(std::size_t array, std::size_t i) {
  const std::uint32_t h = static_cast<std::uint32_t>(i * 2654435761u) ^ static_cast<std::uint32_t>(array * 0x9E3779B9u);
  return 0.1f + static_cast<float>(h % 10007u) / 10007.0f;
}

double reference(const Workload& w, const float* const* inputs, std::size_t i) {
  switch (w.kind) {
    case Workload::Kind::sincos: {
      // The GPU iterates in float; follow it step by step in float, each step
      // correctly rounded via double, so the only difference is sinf/cosf ulps.
      float v = inputs[0][i];
      for (int k = 0; k < w.iterations; ++k)
        v = static_cast<float>(std::sin(static_cast<double>(v))) * static_cast<float>(std::cos(static_cast<double>(v)));
      return v;
    }
    case Workload::Kind::vector_add: return inputs[0][i] + inputs[1][i];
    case Workload::Kind::copy: return inputs[0][i];
  }
  return 0;
}

}  // namespace

std::string Workload::name() const {
  switch (kind) {
    case Kind::sincos: return "sincos" + std::to_string(iterations);
    case Kind::vector_add: return "vadd";
    case Kind::copy: return "copy";
  }
  return "?";
}

void Workload::launch(StreamView stream, const float* const* inputs, float* output, std::size_t n) const {
  if (n == 0) return;
  switch (kind) {
    case Kind::sincos: sincos_kernel<<<grid_for(n), 256, 0, stream.get()>>>(inputs[0], output, n, iterations); break;
    case Kind::vector_add: add_kernel<<<grid_for(n), 256, 0, stream.get()>>>(inputs[0], inputs[1], output, n); break;
    case Kind::copy:
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(output, inputs[0], n * sizeof(float), cudaMemcpyDeviceToDevice, stream.get()));
      break;
  }
  SLUICE_CUDA_CHECK(cudaGetLastError());
}

Workload parse_workload(const std::string& name) {
  if (name == "vadd") return {Workload::Kind::vector_add, 0};
  if (name == "copy") return {Workload::Kind::copy, 0};
  if (name.rfind("sincos", 0) == 0 && name.size() > 6) {
    try {
      const int n = std::stoi(name.substr(6));
      if (n > 0 && n <= 100000) return {Workload::Kind::sincos, n};
    } catch (const std::exception&) {
    }
  }
  throw std::invalid_argument("unknown workload '" + name + "' (choose sincosN with N > 0, vadd, copy)");
}

Problem::Problem(Workload workload, std::size_t items, Memory memory)
    : workload_(workload), items_(items), memory_(memory) {
  const std::size_t arrays = workload.input_count() + 1;
  for (std::size_t a = 0; a < arrays; ++a) {
    if (memory == Memory::pinned)
      pinned_.emplace_back(items);
    else
      pageable_.emplace_back(items);
  }
  for (std::size_t a = 0; a + 1 < arrays; ++a) {
    float* d = data(a);
    for (std::size_t i = 0; i < items; ++i) d[i] = input_value(a, i);
  }
  poison_output();
}

float* Problem::data(std::size_t array) {
  return memory_ == Memory::pinned ? pinned_[array].data() : pageable_[array].data();
}
const float* Problem::data(std::size_t array) const {
  return memory_ == Memory::pinned ? pinned_[array].data() : pageable_[array].data();
}

std::span<const float> Problem::input(std::size_t k) const { return {data(k), items_}; }
std::span<float> Problem::output() { return {data(workload_.input_count()), items_}; }

void Problem::poison_output() { fill_with_nan(output()); }

Verification Problem::verify() const {
  const float* inputs[2] = {data(0), workload_.input_count() > 1 ? data(1) : nullptr};
  const float* out = data(workload_.input_count());
  Verification v;
  const bool exact = workload_.kind != Workload::Kind::sincos;
  // sincos references are slow on the CPU: check ~100k spread elements plus
  // both ends against them, and every element for having been written.
  const std::size_t stride = exact ? 1 : std::max<std::size_t>(1, items_ / 100'000);
  for (std::size_t i = 0; i < items_; ++i) {
    if (std::isnan(out[i])) {
      v.detail = "element " + std::to_string(i) + " was never written";
      return v;
    }
    if (i % stride != 0 && i + 1 != items_) continue;
    const double expected = reference(workload_, inputs, i);
    const double tolerance = exact ? 0.0 : 1e-5 + 1e-4 * std::fabs(expected);
    if (std::fabs(out[i] - expected) > tolerance) {
      v.detail = "element " + std::to_string(i) + " is " + std::to_string(out[i]) + ", expected " +
                 std::to_string(expected);
      return v;
    }
    ++v.checked;
  }
  v.ok = true;
  return v;
}

}  // namespace sluice::workloads
