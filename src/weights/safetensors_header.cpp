#include "weights/safetensors_header.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "io/read_fully.hpp"
#include "sluice/core/io_error.hpp"
#include "weights/safetensors_header_parse.hpp"

namespace sluice::weights {

namespace {

struct DTypeFacts {
  DType dtype;
  std::string_view name;
  std::size_t bits;
};

// In the order of the enum, so that a dtype's facts are at its index.
constexpr std::array<DTypeFacts, 22> dtypes{{
    {DType::BOOL, "BOOL", 8},          {DType::F4, "F4", 4},
    {DType::F6_E2M3, "F6_E2M3", 6},    {DType::F6_E3M2, "F6_E3M2", 6},
    {DType::U8, "U8", 8},              {DType::I8, "I8", 8},
    {DType::F8_E5M2, "F8_E5M2", 8},    {DType::F8_E4M3, "F8_E4M3", 8},
    {DType::F8_E8M0, "F8_E8M0", 8},    {DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8}, {DType::I16, "I16", 16},
    {DType::U16, "U16", 16},           {DType::F16, "F16", 16},
    {DType::BF16, "BF16", 16},         {DType::I32, "I32", 32},
    {DType::U32, "U32", 32},           {DType::F32, "F32", 32},
    {DType::C64, "C64", 64},           {DType::F64, "F64", 64},
    {DType::I64, "I64", 64},           {DType::U64, "U64", 64},
}};

const DTypeFacts& facts(DType dtype) { return dtypes.at(static_cast<std::size_t>(dtype)); }

using header_json::named;
using header_json::refusal;

// The tensors, sorted by offset, must tile the data bytes exactly: no hole
// (room for a second file hidden in the first), no overlap, nothing past the end.
void check_layout(const std::vector<TensorEntry>& tensors, std::uint64_t data_begin, std::uint64_t file_bytes,
                  const std::string& path) {
  const std::uint64_t data_bytes = file_bytes - data_begin;
  std::uint64_t cursor = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& t : tensors) {
    const std::string range = " (data bytes [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "))";
    if (t.begin > cursor && cursor == 0)
      throw refusal(path, "tensor " + named(t.name) + range + " is the first and does not start at 0: the first " +
                              std::to_string(t.begin) + " data bytes belong to no tensor");
    if (t.begin > cursor)
      throw refusal(path, "a hole: data bytes [" + std::to_string(cursor) + ", " + std::to_string(t.begin) +
                              ") between tensor " + named(previous->name) + " and tensor " + named(t.name) +
                              range + " belong to no tensor");
    if (t.begin < cursor)
      throw refusal(path, "tensor " + named(t.name) + range + " overlaps tensor " + named(previous->name) +
                              " (data bytes [" + std::to_string(previous->begin) + ", " +
                              std::to_string(previous->end) + "))");
    if (t.end > data_bytes)
      throw refusal(path, "truncated: tensor " + named(t.name) + range + " ends at file byte " +
                              std::to_string(data_begin + t.end) + ", past the file's end at " +
                              std::to_string(file_bytes));
    cursor = t.end;
    previous = &t;
  }
  if (cursor != data_bytes)
    throw refusal(path, "the tensors end at file byte " + std::to_string(data_begin + cursor) +
                            " but the file goes on to " + std::to_string(file_bytes) + ": its last " +
                            std::to_string(data_bytes - cursor) + " bytes belong to no tensor");
}

struct OpenFile {
  explicit OpenFile(const std::string& p) : fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd < 0) throw IoError(p, 0, std::string("cannot open for reading: ") + std::strerror(errno));
  }
  ~OpenFile() { ::close(fd); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  int fd;
};

}  // namespace

std::size_t dtype_bits(DType dtype) { return facts(dtype).bits; }

std::size_t dtype_bytes(DType dtype) {
  const DTypeFacts& f = facts(dtype);
  if (f.bits % 8 != 0)
    throw std::invalid_argument("dtype " + std::string(f.name) + " is " + std::to_string(f.bits) +
                                " bits an element, not a whole number of bytes: count it with dtype_bits");
  return f.bits / 8;
}

std::string_view to_string(DType dtype) { return facts(dtype).name; }

std::optional<DType> dtype_from(std::string_view name) {
  for (const DTypeFacts& f : dtypes)
    if (f.name == name) return f.dtype;
  return std::nullopt;
}

std::uint64_t safetensors_header_bytes(std::span<const std::byte, 8> first8, std::uint64_t file_bytes,
                                       const std::string& path) {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < 8; ++i) n |= std::uint64_t{std::to_integer<std::uint8_t>(first8[i])} << (8 * i);
  if (n > safetensors_max_header_bytes)
    throw refusal(path, "header too large: " + std::to_string(n) + " bytes, over the limit of " +
                            std::to_string(safetensors_max_header_bytes));
  if (file_bytes < 8 || n > file_bytes - 8)
    throw refusal(path, "truncated: the header needs bytes [8, " + std::to_string(8 + n) + ") but the file has " +
                            std::to_string(file_bytes) + " bytes");
  return n;
}

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> first_bytes, std::uint64_t file_bytes,
                                           const std::string& path) {
  if (file_bytes < 8 || first_bytes.size() < 8)
    throw refusal(path, "truncated: " + std::to_string(std::min<std::uint64_t>(file_bytes, first_bytes.size())) +
                            " bytes, shorter than the 8-byte header size");
  const std::uint64_t n = safetensors_header_bytes(first_bytes.first<8>(), file_bytes, path);
  if (first_bytes.size() - 8 < n)
    throw std::invalid_argument("parse_safetensors_header: given " + std::to_string(first_bytes.size()) +
                                " bytes, but the header's size asks for 8 + " + std::to_string(n));
  const std::string_view text(reinterpret_cast<const char*>(first_bytes.data() + 8), n);

  header_json::Parsed json = header_json::parse(text, path);
  SafetensorsHeader header;
  header.tensors = std::move(json.tensors);
  header.metadata = std::move(json.metadata);
  header.data_begin = 8 + n;
  header.file_bytes = file_bytes;
  // Writers order tensors by offset, but older ones ordered them by name; the
  // reference reader sorts, and so does this one.
  std::stable_sort(header.tensors.begin(), header.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  check_layout(header.tensors, header.data_begin, file_bytes, path);
  for (TensorEntry& t : header.tensors) {
    t.begin += header.data_begin;
    t.end += header.data_begin;
  }
  return header;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  const OpenFile file(path);
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) throw IoError(path, 0, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw IoError(path, 0, "not a regular file");
  // Which file this is: its tensors are read later, by path, and must come from this file as it is now.
  const sluice::detail::FileIdentity identity = sluice::detail::identify(file.fd, path);
  const std::uint64_t file_bytes = identity.size;

  std::vector<std::byte> bytes(8);
  const auto read = [&](std::size_t from) {
    const sluice::detail::ReadOutcome r = sluice::detail::read_fully(file.fd, bytes.data() + from, bytes.size() - from, from);
    if (r.error != 0)
      throw IoError(path, from + r.done, std::string("read of the safetensors header failed: ") + std::strerror(r.error));
    return from + r.done;
  };
  if (const std::size_t got = read(0); got < 8)
    return parse_safetensors_header(std::span(bytes.data(), got), file_bytes, path);
  const std::uint64_t n = safetensors_header_bytes(std::span<const std::byte, 8>(bytes.data(), 8), file_bytes, path);
  bytes.resize(8 + n);
  if (read(8) < bytes.size())
    throw IoError(path, 8, "the file ended inside its safetensors header (truncated while being read?)");
  SafetensorsHeader header = parse_safetensors_header(bytes, file_bytes, path);
  if (const auto now = sluice::detail::identify(file.fd, path); !now.unchanged_since(identity))
    throw IoError(path, 0, "changed while its safetensors header was being read: " + sluice::detail::what_changed(identity, now));
  header.file = identity;
  return header;
}

}  // namespace sluice::weights
