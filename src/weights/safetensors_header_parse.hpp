#pragma once
// The JSON of a safetensors header, checked against the format as it is
// parsed (safetensors_header.hpp says what the format is). A checkpoint is
// untrusted input: the parse refuses the first thing the format does not
// allow the moment it reads it, keeps nothing but the tensors' entries and
// the metadata (memory in proportion to the header), nests no deeper than a
// small bound, and quotes at most a few dozen characters of anything it
// refuses. Host-only.
#include <cstddef>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "weights/safetensors_header.hpp"

namespace sluice::weights::header_json {

// Levels of arrays and objects a header may nest: the format needs 3 (the
// header, a tensor, its shape); the reference reader ignores keys of a
// tensor's object it does not know, whose values may use the rest.
inline constexpr std::size_t max_header_depth = 8;
// Dimensions a shape may have: numpy 2's NPY_MAXDIMS (numpy 1 took 32). torch
// makes tensors of more (1000 on torch 1.13), but its CUDA elementwise kernels
// take at most 25 (OffsetCalculator's MAX_DIMS), so no checkpoint a framework
// writes comes near it.
inline constexpr std::size_t max_shape_dims = 64;
// Characters of a name or a value that a message quotes before it cuts them short.
inline constexpr std::size_t quoted_chars = 60;

// What the header's JSON holds: the tensors in the header's order, offsets
// still relative to the data, each checked alone (its dtype, its shape, its
// offsets, and that they hold its shape times its dtype); their layout is
// checked by the caller.
struct Parsed {
  std::vector<TensorEntry> tensors;
  std::map<std::string, std::string> metadata;
};

// Every refusal is a std::invalid_argument naming the file (when `path` is given) and the tensor.
Parsed parse(std::string_view text, const std::string& path);

// A refusal of the file at `path`, or of "safetensors file" when no path is given.
std::invalid_argument refusal(const std::string& path, const std::string& what);

// At most `limit` characters of `text`, as a message can carry them: valid
// UTF-8 kept, control characters and bytes that are not UTF-8 written \xNN,
// "..." where the text was cut.
std::string printable(std::string_view text, std::size_t limit = quoted_chars);

// A name in single quotes, printable and cut as printable() cuts it.
std::string named(std::string_view name);

}  // namespace sluice::weights::header_json
