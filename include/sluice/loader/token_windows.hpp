#pragma once
// Training windows over token shards: window k of a shard is its tokens
// [k T, k T + T + 1), whose first T are a row of inputs and last T the row of
// targets (the next token of each). Windows do not cross shards. Host-only.
#include <cstddef>
#include <vector>

#include "sluice/loader/token_shard.hpp"

namespace sluice {

struct TokenWindow {
  std::size_t shard = 0;
  std::size_t first_token = 0;  // within the shard
};

class TokenWindows {
 public:
  // Throws ShardError naming a shard shorter than seq + 1 tokens, std::invalid_argument for seq 0.
  TokenWindows(std::vector<TokenShard> shards, std::size_t seq);
  std::size_t count() const { return starts_.back(); }
  std::size_t seq() const { return seq_; }
  const std::vector<TokenShard>& shards() const { return shards_; }
  // The window with global index `index` (shards in order).
  TokenWindow window(std::size_t index) const;

 private:
  std::vector<TokenShard> shards_;
  std::size_t seq_;
  std::vector<std::size_t> starts_;  // first global window of each shard, then the total
};

}  // namespace sluice
