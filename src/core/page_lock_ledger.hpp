#pragma once
// Every range sluice page-locked in this process (sluice::HostRegistration,
// which the pipelines' own locks use too), for tests and soaks that check
// afterwards that none stays locked beyond its owner: a registration that
// outlives its memory makes the driver treat whatever is later allocated
// there as page-locked, and copies from it fail. Host-only.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::detail {

struct PageLockRecord {
  std::uintptr_t begin = 0;
  std::size_t bytes = 0;
  bool live = false;        // registered now
  bool unlock_failed = false;  // cudaHostUnregister refused when it ended
};

// Live ranges, and the last ended ones (at most ledger_ended_kept), oldest first.
std::vector<PageLockRecord> page_lock_ledger();
inline constexpr std::size_t ledger_ended_kept = 4096;

void ledger_locked(const void* begin, std::size_t bytes);
void ledger_unlocked(const void* begin, bool failed);

}  // namespace sluice::detail
