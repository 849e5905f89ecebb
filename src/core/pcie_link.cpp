#include "pcie_link.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <string>

namespace sluice {

namespace {
std::optional<std::string> read_line(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

int to_width(const std::optional<std::string>& text) {
  if (!text) return 0;
  try {
    return std::stoi(*text);
  } catch (const std::exception&) {
    return 0;
  }
}
}  // namespace

double PcieLink::theoretical_gbps() const {
  double transfers = 0;  // GT/s per lane
  try {
    transfers = std::stod(current_speed);
  } catch (const std::exception&) {
    return 0;
  }
  // Gen1/2 use 8b/10b encoding, Gen3 and later 128b/130b.
  const double encoding = transfers <= 5.0 ? 0.8 : 128.0 / 130.0;
  return transfers * current_width * encoding / 8.0;
}

std::optional<PcieLink> read_pcie_link(std::string_view bus_id, const std::filesystem::path& sysfs_root) {
  std::string id(bus_id);
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const auto dir = sysfs_root / "bus" / "pci" / "devices" / id;
  auto speed = read_line(dir / "current_link_speed");
  auto width = read_line(dir / "current_link_width");
  if (!speed || !width) return std::nullopt;
  PcieLink link;
  link.current_speed = *speed;
  link.current_width = to_width(width);
  link.max_speed = read_line(dir / "max_link_speed").value_or("");
  link.max_width = to_width(read_line(dir / "max_link_width"));
  if (link.current_width <= 0 || link.current_speed.empty() || link.current_speed == "Unknown") return std::nullopt;
  return link;
}

}  // namespace sluice
