#pragma once
// What a GPU can do for overlap, as plain data. Host-only: filled by
// sluice::Device::info() (core), formatted and explained without CUDA.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace sluice {

// The PCIe link a GPU sits on, as the operating system reports it.
struct PcieLink {
  std::string current_speed;  // e.g. "32.0 GT/s PCIe"
  int current_width = 0;      // lanes, e.g. 16
  std::string max_speed;
  int max_width = 0;
  // Theoretical one-direction payload ceiling in GB/s from speed and width,
  // after line encoding; 0 when the speed string is not understood.
  double theoretical_gbps() const;
};

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int sm_count = 0;
  // Copy engines: 1 means H2D and D2H take turns; 2 or more lets them overlap.
  int async_engine_count = 0;
  bool concurrent_kernels = false;
  bool unified_addressing = false;
  bool can_map_host_memory = false;
  // CUDA's convention: a numerically lower value is a higher priority.
  int least_stream_priority = 0;
  int greatest_stream_priority = 0;
  std::size_t total_memory_bytes = 0;
  std::size_t free_memory_bytes = 0;
  std::size_t l2_cache_bytes = 0;
  std::string pci_bus_id;
  std::optional<PcieLink> pcie_link;  // absent where the system does not say
};

// One line per capability, saying what it means for overlapping copies and
// kernels on this device. Drawn from the fields, never canned.
std::vector<std::string> overlap_notes(const DeviceInfo& info);

}  // namespace sluice
