#pragma once
// The PCIe link a GPU sits on, as the operating system reports it.
// Host-only: read from sysfs (Linux), so it needs neither CUDA nor NVML.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

struct PcieLink {
  std::string current_speed;  // e.g. "32.0 GT/s PCIe"
  int current_width = 0;      // lanes, e.g. 16
  std::string max_speed;
  int max_width = 0;
  // Theoretical one-direction payload ceiling in GB/s from speed and width,
  // after line encoding; 0 when the speed string is not understood.
  double theoretical_gbps() const;
};

// bus_id as CUDA gives it ("0000:3B:00.0"); sysfs_root lets tests point at a
// fake tree. Returns nullopt when the files are missing or unreadable.
std::optional<PcieLink> read_pcie_link(std::string_view bus_id,
                                       const std::filesystem::path& sysfs_root = "/sys");

}  // namespace sluice
