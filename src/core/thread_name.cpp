#include "core/thread_name.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstddef>

namespace sluice::detail {

void name_this_thread(std::string_view name) noexcept {
  // The kernel's limit is 16 bytes with the terminating zero; a longer name is refused, not cut.
  char cut[16] = {};
  name.copy(cut, std::min<std::size_t>(name.size(), sizeof cut - 1));
  (void)pthread_setname_np(pthread_self(), cut);
}

}  // namespace sluice::detail
