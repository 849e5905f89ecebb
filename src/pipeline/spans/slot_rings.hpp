#pragma once
// The memory a schedule's rings cycle through: per span, `depth` device
// slots and, for spans that pass through the host, pinned stage-in and
// stage-out slots. Kept across runs and grown only when a run needs more:
// allocating pinned memory costs milliseconds, and a pipeline run over and
// over on data of one shape should pay for it once. What a run needs is
// checked against free device and host memory before anything is
// allocated, so a run that cannot fit is refused before any work.
// Host-only.
#include <cstddef>
#include <vector>

#include "pipeline/executors/executor.hpp"
#include "sluice/pipeline/schedule.hpp"

namespace sluice::detail {

class SlotRings {
 public:
  struct Allocated {
    std::size_t device = 0, pinned = 0;
  };
  // Makes every ring at least the schedule's size, its slots at least the
  // schedule's slot bytes. Throws std::invalid_argument, having allocated
  // nothing, when the device or the host has too little memory free.
  Allocated prepare(const Schedule& schedule, Executor& executor);
  void clear();

  std::byte* device(std::size_t span, std::size_t slot) const { return device_[span][slot].data(); }
  std::byte* pinned_in(std::size_t span, std::size_t slot) const { return in_[span][slot].data(); }
  std::byte* pinned_out(std::size_t span, std::size_t slot) const { return out_[span][slot].data(); }
  // Pinned bytes held now, every ring together.
  std::size_t pinned_bytes() const;
  // Changes whenever slot memory is allocated anew (a captured run refers to the old).
  std::uint64_t version() const { return version_; }

 private:
  std::vector<std::vector<SlotMemory>> device_, in_, out_;  // [span][slot]
  std::uint64_t version_ = 0;
};

}  // namespace sluice::detail
