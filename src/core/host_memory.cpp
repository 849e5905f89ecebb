#include "host_memory.hpp"

#include <fstream>
#include <string>

namespace sluice::detail {

std::size_t available_host_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  std::size_t kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

}  // namespace sluice::detail
