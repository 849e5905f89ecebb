#include "sluice/core/device_info.hpp"

#include <fmt/format.h>

namespace sluice {

std::vector<std::string> overlap_notes(const DeviceInfo& info) {
  std::vector<std::string> notes;
  const int engines = info.async_engine_count;
  if (engines <= 0)
    notes.push_back("0 copy engines: copies cannot overlap kernels; streams gain nothing for copy-in/compute/copy-out");
  else if (engines == 1)
    notes.push_back("1 copy engine: copies overlap kernels, but H2D and D2H take turns");
  else
    notes.push_back(fmt::format("{} copy engines: H2D and D2H can run at once, beside kernels", engines));

  if (info.concurrent_kernels)
    notes.push_back(fmt::format("concurrent kernels: kernels in different streams share the {} SMs when each leaves room",
                                info.sm_count));
  else
    notes.push_back("no concurrent kernels: kernels run one at a time whatever the stream");

  const int levels = info.least_stream_priority - info.greatest_stream_priority + 1;
  if (levels > 1)
    notes.push_back(fmt::format("{} stream priority levels ({} highest .. {} lowest): urgent work can jump the queue",
                                levels, info.greatest_stream_priority, info.least_stream_priority));
  else
    notes.push_back("one stream priority level: urgent work cannot jump the queue");

  if (info.unified_addressing)
    notes.push_back("unified addressing: a pointer says whether it is pageable, pinned or device memory");

  constexpr double gib = 1024.0 * 1024.0 * 1024.0;
  notes.push_back(fmt::format("{:.1f} GiB device memory, {:.1f} GiB free: the pipeline's ring of slots must fit in the free part",
                              static_cast<double>(info.total_memory_bytes) / gib,
                              static_cast<double>(info.free_memory_bytes) / gib));

  if (info.pcie_link)
    notes.push_back(fmt::format("PCIe link {} x{}: about {:.0f} GB/s each way in theory, before protocol overhead",
                                info.pcie_link->current_speed, info.pcie_link->current_width,
                                info.pcie_link->theoretical_gbps()));
  else
    notes.push_back("PCIe link: not reported by this system");
  return notes;
}

}  // namespace sluice
