#pragma once
// How much host memory is free to take, for refusing pinned allocations that
// would starve the machine before they are made. Host-only.
#include <cstddef>

namespace sluice::detail {

// MemAvailable from /proc/meminfo, in bytes; 0 when unknown.
std::size_t available_host_memory();

}  // namespace sluice::detail
