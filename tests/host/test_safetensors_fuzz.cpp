// The safetensors header parser, fuzzed: a checkpoint is untrusted input
// (issue 48). Over generated headers - random JSON, nesting deep and wide,
// offsets and shape products that overflow, duplicate names, bytes that are
// not UTF-8, and valid headers truncated or mutated by bit flips, insertions
// and deletions - parse_safetensors_header either returns a header whose
// tensors tile the data exactly or throws std::invalid_argument naming the
// file in a short printable message: never anything else, never a crash.
// The cases are bounded so that this file runs in seconds under ASan+UBSan on
// two cores (scripts/test runs the host suite again there); RC_PARAMS (e.g.
// "seed=42 max_success=100000") runs more, or replays a failure.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "weights/safetensors_header.hpp"

namespace {

using sluice::weights::DType;
using sluice::weights::parse_safetensors_header;
using sluice::weights::SafetensorsHeader;
using Bytes = std::vector<std::byte>;

constexpr std::string_view path = "fuzz.safetensors";

// Runs `property` for `cases` cases (RC_PARAMS' max_success, when it names one, instead) and says how many ran.
template <typename Property>
void check_cases(int cases, Property property) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(test->test_suite_name()) + "/" + test->name();
  metadata.description = test->name();
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  const char* given = std::getenv("RC_PARAMS");
  if (!given || !std::strstr(given, "max_success")) params.maxSuccess = cases;
  const auto result = rc::detail::checkTestable(property, metadata, params);
  std::ostringstream message;
  rc::detail::printResultMessage(result, message);
  if (!result.template is<rc::detail::SuccessResult>()) FAIL() << message.str();
  std::cout << "[ fuzz ] " << test->name() << ": " << message.str() << std::endl;
}

// ---- what any outcome must be

bool valid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > text.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// The tensors tile the data from its first byte to the file's end, each its shape times its dtype.
void check_tiles(const SafetensorsHeader& h, const Bytes& file) {
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{std::to_integer<std::uint8_t>(file[i])} << (8 * i);
  RC_ASSERT(h.data_begin == 8 + n);
  RC_ASSERT(h.file_bytes == file.size());
  std::uint64_t cursor = h.data_begin;
  std::set<std::string> names;
  for (const auto& t : h.tensors) {
    RC_ASSERT(t.begin == cursor);
    RC_ASSERT(t.end >= t.begin);
    RC_ASSERT(names.insert(t.name).second);
    RC_ASSERT(t.name != "__metadata__");
    RC_ASSERT(t.shape.size() <= 64u);
    // Elements times bits, saturating far past 64 bits.
    constexpr unsigned __int128 saturated = static_cast<unsigned __int128>(1) << 100;
    unsigned __int128 bits = sluice::weights::dtype_bits(t.dtype);
    for (const std::int64_t d : t.shape) {
      RC_ASSERT(d >= 0);
      bits = d != 0 && bits > saturated / static_cast<std::uint64_t>(d) ? saturated : bits * static_cast<std::uint64_t>(d);
    }
    RC_ASSERT(bits == static_cast<unsigned __int128>(t.bytes()) * 8);
    cursor = t.end;
  }
  RC_ASSERT(cursor == h.file_bytes);
}

// What parse_safetensors_header makes of `file`: a header that tiles, or a refusal naming the file.
void expect_header_or_refusal(const Bytes& file) {
  std::string refusal;
  bool refused = false;
  try {
    const SafetensorsHeader h = parse_safetensors_header(file, file.size(), std::string(path));
    check_tiles(h, file);
  } catch (const std::invalid_argument& e) {
    refused = true;
    refusal = e.what();
  }
  // Anything else thrown escapes: rapidcheck counts it a failure.
  if (refused) {
    RC_ASSERT(refusal.rfind(std::string(path) + ": ", 0) == 0u);
    RC_ASSERT(refusal.size() < 600u);  // quotes of at most ~60 characters, never a value dumped
    RC_ASSERT(valid_utf8(refusal));
  }
  RC_TAG(refused ? "refused" : "read");
}

// ---- generated text

Bytes file_of(std::string_view header, std::size_t data_bytes) {
  Bytes out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((std::uint64_t{header.size()} >> (8 * i)) & 0xFF));
  const auto* text = reinterpret_cast<const std::byte*>(header.data());
  out.insert(out.end(), text, text + header.size());
  out.resize(out.size() + data_bytes, std::byte{0x5A});
  return out;
}

template <typename T>
T pick(std::initializer_list<T> values) {
  return *rc::gen::elementOf(std::vector<T>(values));
}

std::string number_text() {
  switch (*rc::gen::inRange(0, 9)) {
    case 0: return std::to_string(*rc::gen::inRange<std::uint64_t>(0, 5000));
    case 1: return std::to_string(*rc::gen::arbitrary<std::uint64_t>());
    case 2: return std::to_string(std::numeric_limits<std::uint64_t>::max() - *rc::gen::inRange<std::uint64_t>(0, 3));
    case 3: return "-" + std::to_string(*rc::gen::inRange<std::uint64_t>(0, 100));
    case 4: return pick<std::string>({"1.5", "2.0", "1e3", "-0", "0.0", "1E-7", "9223372036854775808", "18446744073709551616"});
    case 5: return std::string(*rc::gen::inRange(20, 400), '9');        // past 64 bits: a float, or too large for one
    case 6: return "1" + std::string(*rc::gen::inRange(1, 30), '0');
    case 7: return std::to_string(std::uint64_t{1} << *rc::gen::inRange(0, 64));
    default: return pick<std::string>({"4294967296", "9223372036854775807", "0"});
  }
}

// A JSON string's text: printable names, escapes, names of the format, and bytes that are not UTF-8.
std::string string_text() {
  std::string s;
  switch (*rc::gen::inRange(0, 6)) {
    case 0: s = pick<std::string>({"a", "b", "w", "__metadata__", "dtype", "shape", "data_offsets", "F32", "U8"}); break;
    case 1: s = *rc::gen::container<std::string>(rc::gen::inRange('a', 'f')); break;
    case 2: s = pick<std::string>({"\\u0000", "\\\"", "\\\\", "\\ud83d\\ude00", "\\ud800", "caf\xc3\xa9", "\xf0\x9f\x98\x80"}); break;
    case 3: s = std::string(1, static_cast<char>(*rc::gen::inRange(0x80, 0x100))); break;  // alone, never UTF-8
    case 4: s = std::string(*rc::gen::inRange(60, 3000), 'x'); break;
    default: s = pick<std::string>({"BF16", "F4", "F6_E2M3", "C64", "F33", "", "u8"}); break;
  }
  return "\"" + s + "\"";
}

std::string json_value(int depth);

std::string container_text(int depth, bool object) {
  const int elements = *rc::gen::inRange(0, 4);
  std::string text = object ? "{" : "[";
  for (int k = 0; k < elements; ++k) {
    if (k) text += ",";
    if (object) text += string_text() + ":";
    text += json_value(depth - 1);
  }
  return text + (object ? "}" : "]");
}

std::string json_value(int depth) {
  const int kind = *rc::gen::inRange(0, depth > 0 ? 8 : 5);
  switch (kind) {
    case 0: return "null";
    case 1: return pick<std::string>({"true", "false"});
    case 2:
    case 3: return number_text();
    case 4: return string_text();
    case 5:
    case 6: return container_text(depth, kind == 5);
    default: {  // nested far past what any header needs
      const std::size_t n = pick<std::size_t>({9, 65, 1000, 100'000});
      return std::string(n, '[') + (*rc::gen::arbitrary<bool>() ? std::string(n, ']') : "");
    }
  }
}

std::string array_of(const std::vector<std::string>& elements) {
  std::string text = "[";
  for (std::size_t k = 0; k < elements.size(); ++k) text += (k ? "," : "") + elements[k];
  return text + "]";
}

const std::vector<std::string> dtype_names{"BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
                                           "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16",
                                           "I32", "U32", "F32", "C64", "F64", "I64", "U64"};

// A tensor's object, each field either right for `begin` or hostile; fields and unknown keys in any order.
std::string tensor_text(std::uint64_t& cursor) {
  std::vector<std::string> fields;
  const std::string dtype = *rc::gen::elementOf(dtype_names);
  std::vector<std::uint64_t> dims;
  const int rank = *rc::gen::inRange(0, 4);
  std::uint64_t elements = 1;
  for (int d = 0; d < rank; ++d) elements *= dims.emplace_back(*rc::gen::inRange<std::uint64_t>(0, 5));
  const std::uint64_t bytes = elements * sluice::weights::dtype_bits(*sluice::weights::dtype_from(dtype)) / 8;
  std::vector<std::string> dim_text;
  for (const auto d : dims) dim_text.push_back(std::to_string(d));

  if (*rc::gen::inRange(0, 10) > 0) fields.push_back("\"dtype\":" + (*rc::gen::inRange(0, 8) ? "\"" + dtype + "\"" : json_value(2)));
  if (*rc::gen::inRange(0, 10) > 0) {
    switch (*rc::gen::inRange(0, 8)) {
      case 0: fields.push_back("\"shape\":" + json_value(3)); break;
      case 1: {  // many dimensions, or numbers of any kind
        std::vector<std::string> many(*rc::gen::inRange(1, 200), "1");
        for (auto& d : many)
          if (*rc::gen::inRange(0, 20) == 0) d = number_text();
        fields.push_back("\"shape\":" + array_of(many));
        break;
      }
      case 2: {  // a product past 64 bits
        std::vector<std::string> big(*rc::gen::inRange(2, 8), std::to_string(*rc::gen::inRange<std::uint64_t>(1u << 20, 1u << 31)));
        fields.push_back("\"shape\":" + array_of(big));
        break;
      }
      default: fields.push_back("\"shape\":" + array_of(dim_text));
    }
  }
  if (*rc::gen::inRange(0, 10) > 0) {
    std::uint64_t begin = cursor, end = cursor + bytes;
    switch (*rc::gen::inRange(0, 10)) {
      case 0: fields.push_back("\"data_offsets\":" + json_value(3)); break;
      case 1: fields.push_back("\"data_offsets\":" + array_of({number_text(), number_text()})); break;
      case 2: fields.push_back("\"data_offsets\":" + array_of({std::to_string(begin), std::to_string(end), number_text()})); break;
      case 3: fields.push_back("\"data_offsets\":" + array_of({std::to_string(end), std::to_string(begin)})); break;
      case 4: {  // near the top of 64 bits: begin + bytes and end - begin must not wrap
        begin = std::numeric_limits<std::uint64_t>::max() - *rc::gen::inRange<std::uint64_t>(0, 10);
        end = begin + std::min<std::uint64_t>(bytes, std::numeric_limits<std::uint64_t>::max() - begin);
        fields.push_back("\"data_offsets\":" + array_of({std::to_string(begin), std::to_string(end)}));
        break;
      }
      default:
        fields.push_back("\"data_offsets\":" + array_of({std::to_string(begin), std::to_string(end)}));
        cursor = end;
    }
  }
  for (int k = *rc::gen::inRange(0, 3); k > 0; --k) fields.push_back(string_text() + ":" + json_value(*rc::gen::inRange(0, 10)));
  if (!fields.empty() && *rc::gen::inRange(0, 12) == 0) fields.push_back(*rc::gen::elementOf(fields));  // a duplicate key
  const auto order = *rc::gen::arbitrary<std::vector<int>>();  // shuffle fields in a way rapidcheck can shrink
  for (std::size_t k = 0; k < order.size() && fields.size() > 1; ++k)
    std::swap(fields[k % fields.size()], fields[static_cast<std::size_t>(order[k]) % fields.size()]);
  std::string text = "{";
  for (std::size_t k = 0; k < fields.size(); ++k) text += (k ? "," : "") + fields[k];
  return text + "}";
}

// A header of hostile parts: its tensors, metadata, names that repeat, any JSON in their place.
std::string hostile_header(std::uint64_t& data_bytes) {
  std::string text = "{";
  std::uint64_t cursor = 0;
  const int entries = *rc::gen::inRange(0, 6);
  for (int k = 0; k < entries; ++k) {
    if (k) text += ",";
    switch (*rc::gen::inRange(0, 12)) {
      case 0: text += "\"__metadata__\":" + json_value(3); break;
      case 1: text += R"("__metadata__":{"format":"pt",)" + string_text() + ":" + string_text() + "}"; break;
      case 2: text += string_text() + ":" + json_value(4); break;
      default: text += "\"" + pick<std::string>({"a", "b", "c", "w", "\\u0061"}) + "\":" + tensor_text(cursor);
    }
  }
  data_bytes = *rc::gen::inRange(0, 4) ? cursor : *rc::gen::inRange<std::uint64_t>(0, 64);
  switch (*rc::gen::inRange(0, 12)) {
    case 0: return json_value(3);                                       // not an object at all
    case 1: return text.substr(0, *rc::gen::inRange<std::size_t>(0, text.size() + 1));  // cut short
    case 2: return "  \t" + text + "}" + std::string(*rc::gen::inRange(0, 9), ' ');
    default: return text + "}";
  }
}

// A valid header: tensors of every dtype laid end to end in some order, metadata, padding.
struct ValidFile {
  std::string header;
  std::uint64_t data_bytes = 0;
  std::vector<std::pair<std::string, std::uint64_t>> tensors;  // name and bytes, by offset
};

ValidFile valid_file() {
  ValidFile f;
  std::vector<std::string> entries;
  const int count = *rc::gen::inRange(0, 6);
  for (int k = 0; k < count; ++k) {
    const std::string dtype = *rc::gen::elementOf(dtype_names);
    const std::size_t bits = sluice::weights::dtype_bits(*sluice::weights::dtype_from(dtype));
    std::vector<std::string> dims;
    std::uint64_t elements = 1;
    for (int d = *rc::gen::inRange(bits < 8 ? 1 : 0, 4); d > 0; --d) {  // a sub-byte scalar is not whole bytes
      const std::uint64_t n = *rc::gen::inRange<std::uint64_t>(0, 7) * (bits < 8 ? 4 : 1);  // whole bytes
      dims.push_back(std::to_string(n));
      elements *= n;
    }
    const std::uint64_t bytes = elements * bits / 8, begin = f.data_bytes;
    f.data_bytes += bytes;
    const std::string name = "t" + std::to_string(k) + (*rc::gen::arbitrary<bool>() ? "\xc3\xa9" : "");
    f.tensors.emplace_back(name, bytes);
    entries.push_back("\"" + name + R"(":{"dtype":")" + dtype + R"(","shape":)" + array_of(dims) +
                      R"(,"data_offsets":[)" + std::to_string(begin) + "," + std::to_string(begin + bytes) + "]}");
  }
  if (*rc::gen::arbitrary<bool>()) entries.push_back(R"("__metadata__":{"format":"pt","k":"v"})");
  const auto order = *rc::gen::arbitrary<std::vector<int>>();
  for (std::size_t k = 0; k < order.size() && entries.size() > 1; ++k)
    std::swap(entries[k % entries.size()], entries[static_cast<std::size_t>(order[k]) % entries.size()]);
  f.header = "{";
  for (std::size_t k = 0; k < entries.size(); ++k) f.header += (k ? "," : "") + entries[k];
  f.header += "}" + std::string(*rc::gen::inRange(0, 16), ' ');
  return f;
}

}  // namespace

TEST(SafetensorsFuzz, ValidHeadersAreReadAsWritten) {
  check_cases(1000, [] {
    const ValidFile f = valid_file();
    const Bytes file = file_of(f.header, f.data_bytes);
    const SafetensorsHeader h = parse_safetensors_header(file, file.size(), std::string(path));
    check_tiles(h, file);
    // The tensors with bytes come back in file order, as written; those of none may sit at any of their offsets' ties.
    std::vector<std::pair<std::string, std::uint64_t>> got;
    for (const auto& t : h.tensors) got.emplace_back(t.name, t.bytes());
    auto want = f.tensors;
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    RC_ASSERT(got == want);
  });
}

TEST(SafetensorsFuzz, HostileHeadersAreReadOrRefusedNeverAnythingElse) {
  check_cases(4000, [] {
    std::uint64_t data_bytes = 0;
    const std::string header = hostile_header(data_bytes);
    expect_header_or_refusal(file_of(header, data_bytes));
  });
}

TEST(SafetensorsFuzz, MutatedValidFilesAreReadOrRefusedNeverAnythingElse) {
  check_cases(5000, [] {
    const ValidFile f = valid_file();
    Bytes file = file_of(f.header, f.data_bytes);
    // Mutations anywhere in the header and its 8-byte size: bit flips, bytes inserted, bytes deleted,
    // the file cut short; the header's size is kept (the data moves) or fixed up (the header grows).
    for (int m = *rc::gen::inRange(1, 5); m > 0; --m) {
      const std::size_t end = 8 + f.header.size();
      const std::size_t at = *rc::gen::inRange<std::size_t>(0, std::min(end, file.size()));
      switch (*rc::gen::inRange(0, 4)) {
        case 0: file[at] ^= static_cast<std::byte>(1u << *rc::gen::inRange(0, 8)); break;
        case 1: file.insert(file.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::byte>(*rc::gen::inRange(0, 256))); break;
        case 2: file.erase(file.begin() + static_cast<std::ptrdiff_t>(at)); break;
        default: file.resize(*rc::gen::inRange<std::size_t>(0, file.size() + 1));
      }
    }
    if (file.size() < 8) {
      // Too short for the size: a refusal whatever the rest.
      RC_ASSERT_THROWS_AS(parse_safetensors_header(file, file.size(), std::string(path)), std::invalid_argument);
      return;
    }
    expect_header_or_refusal(file);
  });
}

TEST(SafetensorsFuzz, ATwentyMegabyteNestedHeaderIsRefusedAtOnce) {
  // Nested in each place a value may go: as the header, a tensor, its shape, its offsets, an
  // unknown key's value, a metadata value. Refused a few bytes in, not after 20 MB are parsed.
  const std::size_t depth = 10'000'000;
  const std::pair<std::string, std::string> places[] = {
      {"", ""},
      {R"({"t":)", "}"},
      {R"({"t":{"dtype":"U8","shape":)", R"(,"data_offsets":[0,0]}})"},
      {R"({"t":{"dtype":"U8","shape":[],"data_offsets":)", "}}"},
      {R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":)", "}}"},
      {R"({"__metadata__":{"k":)", "}}"}};
  const std::string deep = std::string(depth, '[') + std::string(depth, ']');
  for (const auto& [before, after] : places) {
    const std::string header = before + deep + after;
    const Bytes file = file_of(header, 0);
    EXPECT_THROW(parse_safetensors_header(file, file.size(), std::string(path)), std::invalid_argument) << before;
  }
}
