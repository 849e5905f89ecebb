#pragma once
// The header of a safetensors file, read and checked before any GPU work, so
// that a loader can plan the reads of each tensor's bytes. Host-only.
//
// The format (huggingface/safetensors, "The format"):
//   8 bytes   N, a little-endian u64: the header's size
//   N bytes   UTF-8 JSON: an object whose keys are tensor names, each mapping to
//             {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
//             with offsets relative to the first byte after the header, and an
//             optional "__metadata__" object of string values; JSON whitespace
//             may pad it (writers pad it to align the data that follows)
//   the rest  the tensors' bytes, row-major, little-endian
// A file is refused unless its tensors cover the bytes after the header from
// the first to the last with no hole and no overlap, each exactly its shape
// times its dtype's size, and the file ends where the last tensor does. The
// reference reader refuses headers over 100 MB (decimal); so does this one.
// A checkpoint is untrusted input: the header is checked as it is parsed, and
// one nested deeper than 8 levels or with a shape of more than 64 dimensions
// is refused at once (safetensors_header_parse.hpp says why those bounds).
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/file_calls.hpp"

namespace sluice::weights {

// Every dtype the format names, with its name in the header.
enum class DType {
  BOOL,
  F4,       // 4 bits (OCP MX FP4)
  F6_E2M3,  // 6 bits (OCP MX FP6)
  F6_E3M2,  // 6 bits (OCP MX FP6)
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  F8_E8M0,
  F8_E4M3FNUZ,
  F8_E5M2FNUZ,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  C64,  // complex, two F32
  F64,
  I64,
  U64,
};

// Bits an element: F4 and F6 pack less than a byte, so a tensor's size is
// counted in bits and must come to whole bytes.
std::size_t dtype_bits(DType dtype);
// Bytes an element; std::invalid_argument for F4 and F6, whose elements are not whole bytes.
std::size_t dtype_bytes(DType dtype);
std::string_view to_string(DType dtype);
// The dtype of a header's name ("BF16"), or none for a name the format does not have.
std::optional<DType> dtype_from(std::string_view name);

struct TensorEntry {
  std::string name;
  DType dtype = DType::U8;
  std::vector<std::int64_t> shape;  // [] for a scalar; a 0 anywhere for a tensor of no elements
  std::uint64_t begin = 0;          // absolute offsets in the file: [begin, end)
  std::uint64_t end = 0;
  std::uint64_t bytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;  // in file order (by begin)
  std::map<std::string, std::string> metadata;
  std::uint64_t data_begin = 0;  // 8 + N: where the first tensor's bytes start
  std::uint64_t file_bytes = 0;  // where the last tensor's bytes end
  // The file read_safetensors_header read (none for a header parsed from bytes): its tensors'
  // bytes must be read from that file as it was then (ring::FileReadOptions::expected_file), not
  // from one renamed over its path since or written in place.
  std::optional<sluice::detail::FileIdentity> file;
};

// The reference reader's limit on N.
inline constexpr std::uint64_t safetensors_max_header_bytes = 100'000'000;

// N from the file's first 8 bytes; std::invalid_argument when N is over the
// limit or the header would run past the end of a file of `file_bytes`.
// `path` names the file in messages, when known.
std::uint64_t safetensors_header_bytes(std::span<const std::byte, 8> first8, std::uint64_t file_bytes,
                                       const std::string& path = {});

// Parses and checks the header from the file's first 8 + N bytes (more are
// ignored). Every refusal is a std::invalid_argument naming the file (when
// `path` is given), the tensor and what is wrong.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> first_bytes, std::uint64_t file_bytes,
                                           const std::string& path = {});

// Reads the first 8 + N bytes of the file at `path` and parses them, recording
// which file it read (SafetensorsHeader::file): sluice::IoError when the file
// cannot be opened or read or changes while it is, std::invalid_argument for
// what parsing refuses.
SafetensorsHeader read_safetensors_header(const std::string& path);

}  // namespace sluice::weights
