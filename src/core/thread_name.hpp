#pragma once
// Names the calling thread, so that `top -H`, a debugger and a profiler's
// timeline tell sluice's threads from the caller's. Linux keeps 15
// characters and refuses a longer name: it is cut to 15 here. Host-only.
#include <string_view>

namespace sluice::detail {

void name_this_thread(std::string_view name) noexcept;

}  // namespace sluice::detail
