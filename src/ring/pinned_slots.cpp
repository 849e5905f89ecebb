#include "pinned_slots.hpp"

#include <mutex>
#include <vector>

namespace sluice::detail {

namespace {

// A loader's slots are a few batches (MiB), a checkpoint load's a few chunks
// (3 x 32 MiB by default); several of each are kept.
constexpr std::size_t kept_limit = std::size_t{512} << 20;

struct Kept {
  std::mutex mutex;
  std::vector<PinnedBuffer<std::byte>> slots;
  std::size_t bytes = 0;
};

// Never destroyed: at exit the process's pinned memory goes with it, and
// freeing it from a static destructor would run after the CUDA runtime's own teardown.
Kept& kept() {
  static Kept* k = new Kept;
  return *k;
}

}  // namespace

PinnedBuffer<std::byte> take_pinned_slot(std::size_t bytes) {
  // A slot of no bytes (a file read's, until its first chunk) allocates nothing, so it frees nothing either.
  if (bytes == 0) return PinnedBuffer<std::byte>(0);
  std::vector<PinnedBuffer<std::byte>> beyond_the_bound;  // freed after the lock, oldest kept first
  {
    Kept& k = kept();
    std::lock_guard lock(k.mutex);
    for (auto it = k.slots.begin(); it != k.slots.end(); ++it)
      if (it->size() == bytes) {
        PinnedBuffer<std::byte> slot = std::move(*it);
        k.slots.erase(it);
        k.bytes -= bytes;
        return slot;
      }
    while (k.bytes > kept_limit) {
      k.bytes -= k.slots.front().size();
      beyond_the_bound.push_back(std::move(k.slots.front()));
      k.slots.erase(k.slots.begin());
    }
  }
  beyond_the_bound.clear();
  return PinnedBuffer<std::byte>(bytes);
}

void give_back_pinned_slot(PinnedBuffer<std::byte> slot) noexcept {
  if (slot.empty()) return;
  Kept& k = kept();
  std::lock_guard lock(k.mutex);
  k.bytes += slot.size();
  k.slots.push_back(std::move(slot));
}

std::size_t kept_pinned_bytes() {
  Kept& k = kept();
  std::lock_guard lock(k.mutex);
  return k.bytes;
}

std::size_t kept_pinned_limit() { return kept_limit; }

}  // namespace sluice::detail
