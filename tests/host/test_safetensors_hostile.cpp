// A safetensors checkpoint is untrusted input (issue 48): headers made to hurt
// the reader - nested a million deep, nested past what the format needs,
// shapes of too many dimensions, values too long to quote - are refused as
// std::invalid_argument naming the file, at once, with messages that quote a
// few characters of what they refuse, never the whole of it.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "scratch_dir.hpp"
#include "weights/safetensors_header.hpp"

namespace {

using sluice::weights::parse_safetensors_header;
using Bytes = std::vector<std::byte>;

Bytes file_of(std::string_view header, std::string_view data) {
  Bytes out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((std::uint64_t{header.size()} >> (8 * i)) & 0xFF));
  const auto bytes = [](std::string_view text) { return reinterpret_cast<const std::byte*>(text.data()); };
  out.insert(out.end(), bytes(header), bytes(header) + header.size());
  out.insert(out.end(), bytes(data), bytes(data) + data.size());
  return out;
}

// A tensor "t" of one U8 element, with `field` replaced by `value` and `extra` keys after.
std::string tensor_with(std::string_view field, std::string_view value, std::string_view extra = "") {
  std::string dtype = R"("U8")", shape = "[1]", offsets = "[0,1]";
  if (!field.empty()) (field == "dtype" ? dtype : field == "shape" ? shape : offsets) = value;
  return R"({"t":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets +
         std::string(extra) + "}}";
}

std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// Whether `text` is valid UTF-8 (Python decodes a refusal's message strictly).
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

std::string refusal_of(const Bytes& file) {
  try {
    parse_safetensors_header(file, file.size(), "m.safetensors");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return {};
}

// The message names the file, says each part, and is short and printable whatever it refuses.
void expect_says(const std::string& message, std::initializer_list<std::string_view> parts) {
  EXPECT_EQ(message.rfind("m.safetensors: ", 0), 0u) << message.substr(0, 300);
  for (const auto part : parts) EXPECT_NE(message.find(part), std::string::npos) << "no \"" << part << "\" in: " << message.substr(0, 300);
  EXPECT_LT(message.size(), 400u) << message.substr(0, 300);
  EXPECT_TRUE(valid_utf8(message)) << message.substr(0, 300);
}

TEST(SafetensorsHostile, AShapeOrOffsetsNestedAMillionDeepIsRefusedNamingTheFile) {
  // Before: the parse survived, and the refusal's message dumped the value recursively,
  // overflowing the stack (SIGSEGV).
  expect_says(refusal_of(file_of(tensor_with("shape", nested(1'000'000)), "x")),
              {"'t'", "shape [[", "not an integer of 63 bits"});
  expect_says(refusal_of(file_of(tensor_with("data_offsets", nested(1'000'000)), "x")),
              {"'t'", "data_offsets [[", "is not [begin, end]"});
  // Read from a file, the message names it.
  const sluice::test::ScratchDir dir;
  const std::string path = (dir / "deep.safetensors").string();
  const Bytes file = file_of(tensor_with("shape", nested(1'000'000)), "x");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
  try {
    sluice::weights::read_safetensors_header(path);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": tensor 't'", 0), 0u) << std::string(e.what()).substr(0, 300);
  }
}

TEST(SafetensorsHostile, UnknownKeysAreIgnoredToEightLevelsInAllAndRefusedBeyond) {
  // The reference reader ignores keys a tensor's object does not need; their values may nest to
  // a total depth of 8 (the format needs 3), no further.
  const Bytes six = file_of(tensor_with("", "", R"(,"x":{"y":[[[[1,{}]]]]},"z":null)"), "a");
  EXPECT_EQ(parse_safetensors_header(six, six.size()).tensors.at(0).bytes(), 1u);
  expect_says(refusal_of(file_of(tensor_with("", "", R"(,"x":{"y":[[[[[[1]]]]]]})"), "a")),
              {"'t'", "'x'", "deeper than", "8"});
  // A header of 94 MiB (under the 100 MB limit) nested in an unknown key: before, it was parsed
  // whole into a tree (5.3 GB, 31 s for one like it) and then taken; now it is refused at the
  // ninth level, having read a few bytes of it.
  const std::size_t depth = (std::size_t{94} << 20) / 2;
  expect_says(refusal_of(file_of(tensor_with("", "", ",\"x\":" + nested(depth)), "a")), {"'t'", "deeper than"});
}

TEST(SafetensorsHostile, AShapeOfMoreThan64DimensionsIsRefused) {
  std::string ones = "[1";
  for (int d = 1; d < 64; ++d) ones += ",1";
  const Bytes at_limit = file_of(tensor_with("shape", ones + "]"), "a");
  EXPECT_EQ(parse_safetensors_header(at_limit, at_limit.size()).tensors.at(0).shape.size(), 64u);
  expect_says(refusal_of(file_of(tensor_with("shape", ones + ",1]"), "a")), {"'t'", "more than 64 dimensions"});
  // Refused at the 65th, however many follow.
  std::string wide = ones;
  for (int d = 0; d < 1'000'000; ++d) wide += ",1";
  expect_says(refusal_of(file_of(tensor_with("shape", wide + "]"), "a")), {"'t'", "more than 64 dimensions"});
}

TEST(SafetensorsHostile, MessagesQuoteAFewCharactersOfWhatTheyRefuse) {
  const std::string long_name(1'000'000, 'n');
  const std::string long_text(1'000'000, 'q');
  // A name, a dtype, a metadata key, a number's text, a string of bad UTF-8: each quoted in part.
  expect_says(refusal_of(file_of(R"({")" + long_name + R"(":{"dtype":"F33","shape":[1],"data_offsets":[0,1]}})", "a")),
              {"tensor 'nnnnnnnnnn", "...'", "unknown dtype 'F33'"});
  expect_says(refusal_of(file_of(tensor_with("dtype", "\"" + long_text + "\""), "a")), {"'t'", "unknown dtype 'qqqq", "...'"});
  expect_says(refusal_of(file_of(R"({"__metadata__":{")" + long_text + R"(":1}})", "")), {"__metadata__ 'qqq", "not a string"});
  expect_says(refusal_of(file_of(tensor_with("shape", "[" + std::string(300, '9') + ".5]"), "a")),
              {"'t'", "shape [9999", "...", "not an integer"});
  expect_says(refusal_of(file_of(tensor_with("shape", "[" + std::string(500'000, '9') + "]"), "a")),
              {"not JSON", "9999", "..."});
  expect_says(refusal_of(file_of(R"({"__metadata__":{"k":")" + long_text + "\xff\"}}", "")), {"not JSON", "qqq", "..."});
  expect_says(refusal_of(file_of("{\"t\xc3\":1}", "")), {"not JSON"});
  // Offsets of many elements, and a shape whose product overflows, quoted in part.
  std::string offsets = "[0,1";
  for (int k = 0; k < 100'000; ++k) offsets += ",1";
  expect_says(refusal_of(file_of(tensor_with("data_offsets", offsets + "]"), "a")), {"'t'", "[0,1,1,", "is not [begin, end]"});
  std::string huge = "[4294967296";
  for (int d = 1; d < 64; ++d) huge += ",4294967296";
  expect_says(refusal_of(file_of(tensor_with("shape", huge + "]"), "a")), {"'t'", "more bytes than 64 bits count"});
  // A control character in a name is escaped, not written raw.
  const std::string message = refusal_of(file_of(R"({"a\u0001b":{"dtype":"F33","shape":[1],"data_offsets":[0,1]}})", "a"));
  expect_says(message, {"'a\\x01b'"});
}

TEST(SafetensorsHostile, DuplicateKeysAreRefusedAtAnyLevel) {
  expect_says(refusal_of(file_of(tensor_with("", "", R"(,"x":{"y":{"k":1,"k":2}})"), "a")), {"key 'k' appears twice in 'y'"});
  expect_says(refusal_of(file_of(R"({"__metadata__":{"k":"1","k":"2"}})", "")), {"key 'k' appears twice in '__metadata__'"});
  expect_says(refusal_of(file_of(R"({"__metadata__":{},"__metadata__":{}})", "")), {"'__metadata__' appears twice"});
}

}  // namespace
