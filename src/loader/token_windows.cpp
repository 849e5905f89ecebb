#include "sluice/loader/token_windows.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace sluice {

TokenWindows::TokenWindows(std::vector<TokenShard> shards, std::size_t seq) : shards_(std::move(shards)), seq_(seq) {
  if (seq == 0) throw std::invalid_argument("token windows: sequence length must be at least 1");
  starts_.push_back(0);
  for (const auto& s : shards_) {
    if (s.tokens < seq + 1)
      throw ShardError(s.path + ": " + std::to_string(s.tokens) + " tokens, shorter than one window of seq + 1 = " +
                       std::to_string(seq + 1));
    starts_.push_back(starts_.back() + (s.tokens - 1) / seq);
  }
}

TokenWindow TokenWindows::window(std::size_t index) const {
  if (index >= count()) throw std::out_of_range("window " + std::to_string(index) + " past the last");
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), index) - 1;
  const auto shard = static_cast<std::size_t>(it - starts_.begin());
  return {shard, (index - *it) * seq_};
}

}  // namespace sluice
