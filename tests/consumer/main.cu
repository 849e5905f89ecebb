// The README's example, as a user writes it: a kernel through a Pipeline
// over plain std::vectors. Where there is no GPU it says so and passes.
#include <sluice/loader/batch_prefetcher.hpp>  // first: it needs nothing before it
#include <sluice/sluice.hpp>

#include <cstdio>
#include <vector>

__global__ void add(const float* a, const float* b, float* c, std::size_t n) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

// The prefetcher's header installs and compiles as a user includes it.
static_assert(sizeof(sluice::BatchPiece) > 0);

int main() {
  if (sluice::Device::count() == 0) {
    std::printf("consumer: built and linked against sluice; no GPU here (%s)\n",
                sluice::Device::unavailable_reason().c_str());
    return 0;
  }
  const std::size_t n = 10'000'019;
  std::vector<float> a(n), b(n), c(n, -1.0f);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000);
    b[i] = 0.5f;
  }
  sluice::Pipeline p({.kernel_order = sluice::KernelOrder::independent});
  auto x = p.input(a), y = p.input(b);
  auto z = p.output(c);
  p.compute([=](const sluice::Chunk& chunk) {
    const unsigned blocks = static_cast<unsigned>((chunk.size() + 255) / 256);
    add<<<blocks, 256, 0, chunk.stream>>>(chunk[x].data(), chunk[y].data(), chunk[z].data(), chunk.size());
  });
  const sluice::RunReport report = p.run();
  for (std::size_t i = 0; i < n; ++i)
    if (c[i] != a[i] + 0.5f) {
      std::printf("consumer: element %zu is %f, expected %f\n", i, c[i], a[i] + 0.5f);
      return 1;
    }
  std::printf("consumer: %zu items in %zu chunks on %s, %.2f ms, verified\n", n, report.chunk_count,
              sluice::Device(0).info().name.c_str(), report.wall_ms);
  return 0;
}
