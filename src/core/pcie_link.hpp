#pragma once
// Reads the PCIe link a GPU sits on (DeviceInfo::pcie_link) as the operating
// system reports it. Host-only: read from sysfs (Linux), so it needs neither
// CUDA nor NVML.
#include <filesystem>
#include <optional>
#include <string_view>

#include "sluice/core/device_info.hpp"

namespace sluice {

// bus_id as CUDA gives it ("0000:3B:00.0"); sysfs_root lets tests point at a
// fake tree. Returns nullopt when the files are missing or unreadable.
std::optional<PcieLink> read_pcie_link(std::string_view bus_id,
                                       const std::filesystem::path& sysfs_root = "/sys");

}  // namespace sluice
