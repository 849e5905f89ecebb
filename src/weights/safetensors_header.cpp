#include "weights/safetensors_header.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <utility>

#include "core/read_fully.hpp"
#include "sluice/core/io_error.hpp"

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

using Json = nlohmann::json;

std::invalid_argument refusal(const std::string& path, const std::string& what) {
  return std::invalid_argument((path.empty() ? std::string("safetensors file") : path) + ": " + what);
}

std::string named(std::string_view name) { return "'" + std::string(name) + "'"; }

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// nlohmann keeps the last of two equal keys without a word, and the format
// forbids them: this watches the keys of every object as the parser meets them.
struct DuplicateKeys {
  struct Level {
    std::set<std::string> keys;
    std::string name;  // the key this object is the value of
  };
  std::vector<Level> open;
  std::string last_key;
  std::optional<std::string> found;  // the first duplicate, described

  bool operator()(int /*depth*/, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) {
      open.push_back({{}, last_key});
    } else if (event == Json::parse_event_t::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (event == Json::parse_event_t::key && !open.empty()) {
      last_key = parsed.get<std::string>();
      if (!open.back().keys.insert(last_key).second && !found)
        found = open.size() == 1 ? "tensor name " + named(last_key) + " appears twice in the header"
                                 : "key " + named(last_key) + " appears twice in " + named(open.back().name);
    }
    return true;
  }
};

std::map<std::string, std::string> read_metadata(const Json& value, const std::string& path) {
  std::map<std::string, std::string> metadata;
  if (value.is_null()) return metadata;  // the reference reader takes null as no metadata
  if (!value.is_object())
    throw refusal(path, "__metadata__ is a JSON " + std::string(value.type_name()) + ", not an object of strings");
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      throw refusal(path, "__metadata__ " + named(key) + " is a JSON " + v.type_name() +
                              ", not a string (the format allows only string values)");
    metadata.emplace(key, v.get<std::string>());
  }
  return metadata;
}

const Json& field(const Json& tensor, const char* key, const std::string& name, const std::string& path) {
  const auto it = tensor.find(key);
  if (it == tensor.end()) throw refusal(path, "tensor " + named(name) + " has no \"" + key + "\"");
  return *it;
}

// The tensor's entry with offsets still relative to the data; every check that
// needs only the entry itself is made here.
TensorEntry read_tensor(const std::string& name, const Json& value, const std::string& path) {
  const std::string who = "tensor " + named(name);
  if (!value.is_object())
    throw refusal(path, who + " is a JSON " + value.type_name() + ", not an object of dtype, shape and data_offsets");
  TensorEntry entry;
  entry.name = name;

  const Json& dtype = field(value, "dtype", name, path);
  if (!dtype.is_string()) throw refusal(path, who + ": dtype is a JSON " + dtype.type_name() + ", not a string");
  const auto known = dtype_from(dtype.get<std::string>());
  if (!known) throw refusal(path, who + ": unknown dtype " + named(dtype.get<std::string>()));
  entry.dtype = *known;

  const Json& shape = field(value, "shape", name, path);
  if (!shape.is_array()) throw refusal(path, who + ": shape is a JSON " + shape.type_name() + ", not an array");
  for (const Json& d : shape) {
    if (d.is_number_integer() && !d.is_number_unsigned())
      throw refusal(path, who + ": shape " + shape.dump() + " has a negative dimension");
    if (!d.is_number_unsigned() || d.get<std::uint64_t>() > std::numeric_limits<std::int64_t>::max())
      throw refusal(path, who + ": shape " + shape.dump() + " has a dimension that is not an integer of 63 bits");
    entry.shape.push_back(d.get<std::int64_t>());
  }

  const Json& offsets = field(value, "data_offsets", name, path);
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
    throw refusal(path, who + ": data_offsets " + offsets.dump() + " is not [begin, end] of two unsigned integers");
  entry.begin = offsets[0].get<std::uint64_t>();
  entry.end = offsets[1].get<std::uint64_t>();
  if (entry.end < entry.begin) throw refusal(path, who + ": data_offsets " + offsets.dump() + " end before they begin");

  // Elements times bits, refusing what overflows 64 bits, as the reference reader does.
  std::uint64_t bits = facts(entry.dtype).bits;
  for (const std::int64_t d : entry.shape)
    if (__builtin_mul_overflow(bits, static_cast<std::uint64_t>(d), &bits))
      throw refusal(path, who + ": shape " + shape_text(entry.shape) + " of " + std::string(to_string(entry.dtype)) +
                              " is more bytes than 64 bits count");
  if (bits % 8 != 0)
    throw refusal(path, who + ": shape " + shape_text(entry.shape) + " of " + std::string(to_string(entry.dtype)) +
                            " is " + std::to_string(bits) + " bits, not a whole number of bytes");
  if (entry.bytes() != bits / 8)
    throw refusal(path, who + ": data_offsets " + offsets.dump() + " hold " + std::to_string(entry.bytes()) +
                            " bytes, but shape " + shape_text(entry.shape) + " of " +
                            std::string(to_string(entry.dtype)) + " is " + std::to_string(bits / 8) + " bytes");
  return entry;
}

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
  const auto* text = reinterpret_cast<const char*>(first_bytes.data() + 8);

  DuplicateKeys duplicates;
  Json root;
  try {
    root = Json::parse(text, text + n, std::ref(duplicates));
  } catch (const Json::parse_error& e) {
    throw refusal(path, std::string("the header is not JSON: ") + e.what());
  }
  if (!root.is_object()) throw refusal(path, std::string("the header is a JSON ") + root.type_name() + ", not an object");
  if (duplicates.found) throw refusal(path, *duplicates.found);

  SafetensorsHeader header;
  header.data_begin = 8 + n;
  header.file_bytes = file_bytes;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__")
      header.metadata = read_metadata(value, path);
    else
      header.tensors.push_back(read_tensor(key, value, path));
  }
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
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);

  std::vector<std::byte> bytes(8);
  const auto read = [&](std::size_t from) {
    const detail::ReadOutcome r = detail::read_fully(file.fd, bytes.data() + from, bytes.size() - from, from);
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
  return parse_safetensors_header(bytes, file_bytes, path);
}

}  // namespace sluice::weights
