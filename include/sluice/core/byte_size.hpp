#pragma once
// Byte counts as people write them: "64KiB", "256 MiB", "1G", "4096".
// Host-only.
#include <cstddef>
#include <string>
#include <string_view>

namespace sluice {

// Accepts an integer or decimal number and an optional unit: B, K/KB/KiB,
// M/MB/MiB, G/GB/GiB, T/TB/TiB (all binary: 1K = 1024), case-insensitive.
// Throws std::invalid_argument naming the text when it is not a size.
std::size_t parse_bytes(std::string_view text);

// "64 KiB", "1 GiB", "1.5 KiB".
std::string format_bytes(std::size_t bytes);

}  // namespace sluice
