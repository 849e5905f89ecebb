#include "sluice/loader/token_shard.hpp"

#include <glob.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace sluice {

namespace {
std::int32_t header_word(std::span<const std::byte> header, std::size_t index) {
  std::int32_t value = 0;
  std::memcpy(&value, header.data() + index * sizeof value, sizeof value);
  return value;
}

std::vector<std::string> expand(const std::string& pattern) {
  if (pattern.find_first_of("*?[") == std::string::npos) return {pattern};
  glob_t found{};
  const int status = ::glob(pattern.c_str(), 0, nullptr, &found);
  std::vector<std::string> paths;
  if (status == 0)
    for (std::size_t i = 0; i < found.gl_pathc; ++i) paths.emplace_back(found.gl_pathv[i]);
  globfree(&found);
  if (paths.empty()) throw ShardError("no file matches " + pattern);
  std::sort(paths.begin(), paths.end());
  return paths;
}
}  // namespace

TokenShard parse_shard_header(std::span<const std::byte> header, std::uint64_t file_bytes, const std::string& path) {
  if (header.size() < shard_header_bytes || file_bytes < shard_header_bytes)
    throw ShardError(path + ": " + std::to_string(file_bytes) + " bytes, too short for the " +
                     std::to_string(shard_header_bytes) + "-byte shard header");
  const std::int32_t magic = header_word(header, 0), version = header_word(header, 1), count = header_word(header, 2);
  TokenShard shard;
  shard.path = path;
  if (magic == shard_magic_u16) {
    shard.token_bytes = 2;
    if (version != 1) throw ShardError(path + ": unknown shard version " + std::to_string(version) + " (uint16 shards are version 1)");
  } else if (magic == shard_magic_u32) {
    shard.token_bytes = 4;
    if (version != 1 && version != 7)
      throw ShardError(path + ": unknown shard version " + std::to_string(version) + " (uint32 shards are version 1 or 7)");
  } else {
    throw ShardError(path + ": wrong magic " + std::to_string(magic) + " (a token shard starts with " +
                     std::to_string(shard_magic_u16) + " or " + std::to_string(shard_magic_u32) + ")");
  }
  if (count < 0) throw ShardError(path + ": negative token count " + std::to_string(count));
  shard.tokens = static_cast<std::size_t>(count);
  const std::uint64_t expected = shard_header_bytes + std::uint64_t{shard.tokens} * shard.token_bytes;
  if (file_bytes != expected)
    throw ShardError(path + ": the header says " + std::to_string(shard.tokens) + " tokens of " +
                     std::to_string(shard.token_bytes) + " bytes (" + std::to_string(expected) +
                     " bytes with the header), but the file is " + std::to_string(file_bytes) +
                     (file_bytes < expected ? " bytes: truncated" : " bytes"));
  return shard;
}

std::vector<TokenShard> open_shards(const std::vector<std::string>& files_or_patterns) {
  if (files_or_patterns.empty()) throw ShardError("no token shards given");
  std::vector<TokenShard> shards;
  for (const auto& pattern : files_or_patterns)
    for (const auto& path : expand(pattern)) {
      std::ifstream in(path, std::ios::binary);
      if (!in) throw ShardError(path + ": cannot open for reading: " + std::strerror(errno));
      std::error_code ec;
      const auto bytes = std::filesystem::file_size(path, ec);
      if (ec) throw ShardError(path + ": cannot read its size: " + ec.message());
      std::vector<std::byte> header(shard_header_bytes);
      in.read(reinterpret_cast<char*>(header.data()), static_cast<std::streamsize>(header.size()));
      const auto got = static_cast<std::size_t>(in.gcount());
      shards.push_back(parse_shard_header(std::span(header.data(), got), bytes, path));
      if (shards.back().token_bytes != shards.front().token_bytes)
        throw ShardError(path + ": uint" + std::to_string(8 * shards.back().token_bytes) + " tokens, but " +
                         shards.front().path + " has uint" + std::to_string(8 * shards.front().token_bytes) +
                         ": all shards must have one token width");
    }
  return shards;
}

void write_shard(const std::string& path, std::span<const std::uint32_t> tokens, std::size_t token_bytes) {
  if (token_bytes != 2 && token_bytes != 4) throw std::invalid_argument("write_shard: token_bytes must be 2 or 4");
  if (tokens.size() > static_cast<std::size_t>(INT32_MAX)) throw std::invalid_argument("write_shard: too many tokens for one shard");
  std::vector<std::int32_t> header(256, 0);
  header[0] = token_bytes == 2 ? shard_magic_u16 : shard_magic_u32;
  header[1] = 1;
  header[2] = static_cast<std::int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw ShardError(path + ": cannot create: " + std::strerror(errno));
  out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(shard_header_bytes));
  if (token_bytes == 4) {
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 4));
  } else {
    std::vector<std::uint16_t> narrow(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] > 0xFFFF) throw std::invalid_argument("write_shard: token " + std::to_string(tokens[i]) + " does not fit uint16");
      narrow[i] = static_cast<std::uint16_t>(tokens[i]);
    }
    out.write(reinterpret_cast<const char*>(narrow.data()), static_cast<std::streamsize>(narrow.size() * 2));
  }
  if (!out) throw ShardError(path + ": write failed");
}

}  // namespace sluice
