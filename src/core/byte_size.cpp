#include "sluice/core/byte_size.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace sluice {

std::size_t parse_bytes(std::string_view text) {
  const auto fail = [&] { return std::invalid_argument("not a byte size: '" + std::string(text) + "' (e.g. 4096, 64KiB, 1GiB)"); };
  std::string_view rest = text;
  while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front()))) rest.remove_prefix(1);
  double number = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), number);
  if (ec != std::errc() || number < 0) throw fail();
  std::string unit(end, rest.data() + rest.size());
  unit.erase(std::remove_if(unit.begin(), unit.end(), [](unsigned char c) { return std::isspace(c); }), unit.end());
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  int power = -1;
  if (unit.empty() || unit == "b") power = 0;
  const std::string prefixes = "kmgt";
  if (power < 0 && !unit.empty() && (unit.size() == 1 || unit.substr(1) == "b" || unit.substr(1) == "ib")) {
    const auto at = prefixes.find(unit[0]);
    if (at != std::string::npos) power = static_cast<int>(at) + 1;
  }
  if (power < 0) throw fail();
  const double bytes = number * std::pow(1024.0, power);
  if (bytes != std::floor(bytes) || bytes > 1.8e19) throw fail();
  return static_cast<std::size_t>(bytes);
}

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  if (value == std::floor(value)) return fmt::format("{:.0f} {}", value, units[unit]);
  return fmt::format("{:.1f} {}", value, units[unit]);
}

}  // namespace sluice
