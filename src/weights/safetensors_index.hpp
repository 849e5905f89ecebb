#pragma once
// A sharded checkpoint's index (model.safetensors.index.json, as transformers
// and safetensors write it): which file of the set holds each tensor. The
// index is untrusted input like the files it names: it is parsed event by
// event against its format, to a bounded depth and size, and a file name
// that is not a plain name in the index's own directory (a path, "..", a
// control character) is refused, so that no index reads a file elsewhere.
// Host-only.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::weights {

struct SafetensorsIndex {
  std::vector<std::string> files;  // each once, in the order the index first names them
  struct Entry {
    std::string tensor;
    std::size_t file = 0;  // in files
  };
  std::vector<Entry> tensors;  // in the index's order
};

// The largest index read: far beyond any model's (a tensor's line is ~80 bytes).
inline constexpr std::uint64_t safetensors_max_index_bytes = 100'000'000;

// Parses `text`: {"metadata": {...} (optional, any JSON to a bounded depth),
// "weight_map": {tensor name: file name, ...}}. std::invalid_argument naming
// `path` and what is wrong: not JSON, no weight_map, a value not a string, a
// tensor named twice, a file name that is not a plain name.
SafetensorsIndex parse_safetensors_index(std::string_view text, const std::string& path = {});
// Reads and parses the index at `path`; an IoError for a file that cannot be read or is over the limit.
SafetensorsIndex read_safetensors_index(const std::filesystem::path& path);

}  // namespace sluice::weights
