#include "page_lock_ledger.hpp"

#include <algorithm>
#include <deque>
#include <mutex>

namespace sluice::detail {

namespace {
struct Ledger {
  std::mutex mutex;
  std::vector<PageLockRecord> live;
  std::deque<PageLockRecord> ended;
};
Ledger& ledger() {
  static Ledger instance;
  return instance;
}
}  // namespace

void ledger_locked(const void* begin, std::size_t bytes) {
  Ledger& l = ledger();
  std::lock_guard lock(l.mutex);
  l.live.push_back({reinterpret_cast<std::uintptr_t>(begin), bytes, true, false});
}

void ledger_unlocked(const void* begin, bool failed) {
  Ledger& l = ledger();
  std::lock_guard lock(l.mutex);
  const auto at = reinterpret_cast<std::uintptr_t>(begin);
  auto it = std::find_if(l.live.begin(), l.live.end(), [&](const PageLockRecord& r) { return r.begin == at; });
  if (it == l.live.end()) return;
  PageLockRecord ended = *it;
  l.live.erase(it);
  ended.live = false;
  ended.unlock_failed = failed;
  l.ended.push_back(ended);
  if (l.ended.size() > ledger_ended_kept) l.ended.pop_front();
}

std::vector<PageLockRecord> page_lock_ledger() {
  Ledger& l = ledger();
  std::lock_guard lock(l.mutex);
  std::vector<PageLockRecord> all(l.ended.begin(), l.ended.end());
  all.insert(all.end(), l.live.begin(), l.live.end());
  return all;
}

}  // namespace sluice::detail
