#pragma once
// A named NVTX range for as long as the object lives, so Nsight Systems users
// see sluice's stages by name. Costs next to nothing when no tool listens.
#include <nvtx3/nvToolsExt.h>

#include <cstdio>

namespace sluice::detail {

class NvtxRange {
 public:
  NvtxRange(const char* stage, std::size_t chunk) {
    char name[64];
    std::snprintf(name, sizeof name, "sluice %s chunk %zu", stage, chunk);
    nvtxRangePushA(name);
  }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace sluice::detail
