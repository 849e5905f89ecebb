// Links against the installed sluice: host-only pieces run anywhere, the
// device query runs and says plainly when there is no GPU.
#include <sluice/sluice.hpp>

#include <cstdio>

int main() {
  sluice::ChunkPlan plan(1000, 64);
  if (plan.chunk_count() != 16) return 1;
  const int devices = sluice::Device::count();
  if (devices == 0)
    std::printf("consumer: linked sluice; no GPU here (%s)\n", sluice::Device::unavailable_reason().c_str());
  else
    std::printf("consumer: linked sluice; GPU 0 is %s\n", sluice::Device(0).info().name.c_str());
  return 0;
}
