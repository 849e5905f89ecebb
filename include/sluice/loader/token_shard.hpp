#pragma once
// Token shards in llm.c's format, as training data loaders read them:
//
//   header: 256 x int32 (1024 bytes)
//     [0] magic    20240520 for uint16 tokens (GPT-2), 20240801 for uint32 tokens (LLaMA 3)
//     [1] version  1 (uint16); 1 or 7 (uint32: llm.c writes 7)
//     [2] tokens   the number of tokens that follow
//   then the tokens, little-endian.
//
// Every header is checked before the first batch: a wrong magic, an unknown
// version, a count that disagrees with the file's size, a file too short for
// its header. Host-only.
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice {

constexpr std::int32_t shard_magic_u16 = 20240520;
constexpr std::int32_t shard_magic_u32 = 20240801;
constexpr std::size_t shard_header_bytes = 256 * sizeof(std::int32_t);

// A shard that cannot be used; names the file (and the offset, mid-epoch).
class ShardError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TokenShard {
  std::string path;
  std::size_t tokens = 0;
  std::size_t token_bytes = 2;  // 2 (uint16) or 4 (uint32)
  std::uint64_t data_offset() const { return shard_header_bytes; }
};

// Checks one header against the file's size. Throws ShardError naming `path`.
TokenShard parse_shard_header(std::span<const std::byte> header, std::uint64_t file_bytes, const std::string& path);

// Each argument is a file or a glob pattern (`data/train_*.bin`); the files
// are taken in sorted order, their headers read and checked. Throws
// ShardError naming the first file that cannot be used, or the pattern that
// matches nothing. All shards must have the same token width.
std::vector<TokenShard> open_shards(const std::vector<std::string>& files_or_patterns);

// Writes tokens as a shard (for tests, demos and benchmarks). token_bytes 2 or 4.
void write_shard(const std::string& path, std::span<const std::uint32_t> tokens, std::size_t token_bytes);

}  // namespace sluice
