#include "weights/safetensors_header.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "scratch_dir.hpp"
#include "sluice/core/io_error.hpp"

namespace {

using sluice::weights::DType;
using sluice::weights::parse_safetensors_header;
using sluice::weights::SafetensorsHeader;
using Bytes = std::vector<std::byte>;

void append(Bytes& out, std::string_view text) {
  for (const char c : text) out.push_back(static_cast<std::byte>(c));
}

// 8 bytes of little-endian `n`, then the header text, then the data.
Bytes file_of(std::uint64_t n, std::string_view header, std::string_view data) {
  Bytes out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((n >> (8 * i)) & 0xFF));
  append(out, header);
  append(out, data);
  return out;
}
Bytes file_of(std::string_view header, std::string_view data) { return file_of(header.size(), header, data); }

// A file with three tensors out of offset order in the header (a BF16 matrix,
// an I64 tensor of no elements, an F32 scalar), metadata, and the header padded
// with spaces to 224 bytes, so that the data starts at byte 232.
const std::string valid_header =
    R"({"__metadata__":{"format":"pt","note":"hand-made"},)"
    R"("w":{"dtype":"BF16","shape":[2,3],"data_offsets":[4,16]},)"
    R"("e":{"dtype":"I64","shape":[0,5],"data_offsets":[16,16]},)"
    R"("s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})"
    "       ";

Bytes valid_file() {
  Bytes out{std::byte{0xE0}, std::byte{0}, std::byte{0}, std::byte{0},
            std::byte{0},    std::byte{0}, std::byte{0}, std::byte{0}};  // N = 224
  append(out, valid_header);
  append(out, "ABCDEFGHIJKLMNOP");  // 4 bytes of s, 12 of w
  return out;
}

void expect_valid(const SafetensorsHeader& h) {
  EXPECT_EQ(h.data_begin, 232u);
  EXPECT_EQ(h.file_bytes, 248u);
  EXPECT_EQ(h.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "hand-made"}}));
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "s");
  EXPECT_EQ(h.tensors[0].dtype, DType::F32);
  EXPECT_TRUE(h.tensors[0].shape.empty());
  EXPECT_EQ(h.tensors[0].begin, 232u);
  EXPECT_EQ(h.tensors[0].end, 236u);
  EXPECT_EQ(h.tensors[1].name, "w");
  EXPECT_EQ(h.tensors[1].dtype, DType::BF16);
  EXPECT_EQ(h.tensors[1].shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(h.tensors[1].begin, 236u);
  EXPECT_EQ(h.tensors[1].end, 248u);
  EXPECT_EQ(h.tensors[2].name, "e");
  EXPECT_EQ(h.tensors[2].dtype, DType::I64);
  EXPECT_EQ(h.tensors[2].shape, (std::vector<std::int64_t>{0, 5}));
  EXPECT_EQ(h.tensors[2].begin, 248u);
  EXPECT_EQ(h.tensors[2].end, 248u);
}

// The message of the refusal, or a failure when there is none.
std::string refusal_of(const Bytes& file, std::uint64_t file_bytes, const std::string& path = "m.safetensors") {
  try {
    parse_safetensors_header(file, file_bytes, path);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return {};
}
std::string refusal_of(const Bytes& file) { return refusal_of(file, file.size()); }

void expect_says(const std::string& message, std::initializer_list<std::string_view> parts) {
  EXPECT_EQ(message.rfind("m.safetensors: ", 0), 0u) << message;
  for (const auto part : parts) EXPECT_NE(message.find(part), std::string::npos) << "no \"" << part << "\" in: " << message;
}

TEST(SafetensorsHeader, ReadsTensorsInFileOrderWithMetadataAndPadding) {
  ASSERT_EQ(valid_header.size(), 224u);
  const Bytes file = valid_file();
  expect_valid(parse_safetensors_header(file, file.size()));
}

TEST(SafetensorsHeader, IgnoresBytesPastTheHeader) {
  const Bytes file = valid_file();
  expect_valid(parse_safetensors_header(std::span(file.data(), 232), file.size()));
}

TEST(SafetensorsHeader, TakesLeadingWhitespaceAnEmptyHeaderAndNullMetadata) {
  EXPECT_TRUE(parse_safetensors_header(file_of("\t\n{}\r ", ""), 14).tensors.empty());
  EXPECT_TRUE(parse_safetensors_header(file_of(R"({"__metadata__":null})", ""), 29).metadata.empty());
}

TEST(SafetensorsHeader, CountsSubByteDtypesInBits) {
  const Bytes four = file_of(R"({"t":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}})", "xy");
  EXPECT_EQ(parse_safetensors_header(four, four.size()).tensors.at(0).bytes(), 2u);
  expect_says(refusal_of(file_of(R"({"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", "xy")),
              {"'t'", "12 bits, not a whole number of bytes"});
}

TEST(SafetensorsHeader, RefusesATruncatedFile) {
  expect_says(refusal_of(Bytes(5, std::byte{0})), {"truncated", "shorter than the 8-byte"});
  // N = 100, but the file ends 20 bytes after the size.
  expect_says(refusal_of(file_of(100, "{}                  ", "")), {"truncated", "header needs bytes [8, 108)", "28 bytes"});
  expect_says(refusal_of(file_of(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "12345678")),
              {"truncated", "'t'", "past the file's end"});
}

TEST(SafetensorsHeader, RefusesAHeaderOverTheLimit) {
  const Bytes over = file_of(100'000'001, "", "");
  expect_says(refusal_of(over, 1'000'000'000), {"header too large", "100000001"});
  // At the limit the size is taken, and this file is then too short for it.
  expect_says(refusal_of(file_of(100'000'000, "", "")), {"truncated"});
}

TEST(SafetensorsHeader, RefusesAHeaderThatIsNotAJsonObject) {
  expect_says(refusal_of(file_of(R"({"t":)", "")), {"not JSON"});
  expect_says(refusal_of(file_of("[1,2]", "")), {"array, not an object"});
  expect_says(refusal_of(file_of(R"({"t":[1]})", "")), {"'t'", "array, not an object"});
}

TEST(SafetensorsHeader, RefusesAnUnknownDtype) {
  expect_says(refusal_of(file_of(R"({"t":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "abcd")),
              {"'t'", "unknown dtype 'F33'"});
}

TEST(SafetensorsHeader, RefusesANegativeDimension) {
  expect_says(refusal_of(file_of(R"({"t":{"dtype":"U8","shape":[2,-2],"data_offsets":[0,4]}})", "abcd")),
              {"'t'", "negative dimension"});
}

TEST(SafetensorsHeader, RefusesMissingOrMalformedFields) {
  expect_says(refusal_of(file_of(R"({"t":{"shape":[1],"data_offsets":[0,1]}})", "a")), {"'t'", "no \"dtype\""});
  expect_says(refusal_of(file_of(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1,1]}})", "a")),
              {"'t'", "[0,1,1] is not [begin, end]"});
  expect_says(refusal_of(file_of(R"({"t":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", "a")),
              {"'t'", "not an integer"});
  expect_says(refusal_of(file_of(R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[1,0]}})", "a")),
              {"'t'", "end before they begin"});
}

TEST(SafetensorsHeader, RefusesOverlappingTensors) {
  expect_says(refusal_of(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                 "123456789012")),
              {"tensor 'b' (data bytes [4, 12)) overlaps tensor 'a'"});
}

TEST(SafetensorsHeader, RefusesAHole) {
  expect_says(refusal_of(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                 "123456789012")),
              {"hole", "[4, 8)", "'a'", "'b'"});
}

TEST(SafetensorsHeader, RefusesDataThatDoesNotStartAtZero) {
  expect_says(refusal_of(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "12345678")),
              {"'a'", "does not start at 0"});
}

TEST(SafetensorsHeader, RefusesBytesAfterTheLastTensor) {
  expect_says(refusal_of(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "123456")),
              {"last 2 bytes belong to no tensor"});
}

TEST(SafetensorsHeader, RefusesASizeThatIsNotShapeTimesDtype) {
  expect_says(refusal_of(file_of(R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}})", "12345678")),
              {"'t'", "hold 8 bytes", "[2, 2] of F32 is 16 bytes"});
  expect_says(refusal_of(file_of(R"({"t":{"dtype":"U64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                                 "12345678")),
              {"'t'", "more bytes than 64 bits count"});
}

TEST(SafetensorsHeader, RefusesMetadataThatIsNotStrings) {
  expect_says(refusal_of(file_of(R"({"__metadata__":{"ok":"yes","n":1}})", "")), {"__metadata__ 'n'", "not a string"});
  expect_says(refusal_of(file_of(R"({"__metadata__":["x"]})", "")), {"__metadata__ is a JSON array"});
}

TEST(SafetensorsHeader, RefusesADuplicateName) {
  expect_says(refusal_of(file_of(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                 R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                 "12")),
              {"tensor name 'a' appears twice"});
  expect_says(refusal_of(file_of(R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", "1")),
              {"key 'dtype' appears twice in 'a'"});
}

TEST(SafetensorsHeader, NamesNoFileWhenGivenNone) {
  try {
    parse_safetensors_header(file_of("[]", ""), 10);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("safetensors file: ", 0), 0u) << e.what();
  }
}

TEST(SafetensorsDType, NamesSizesAndParses) {
  using sluice::weights::dtype_bits;
  using sluice::weights::dtype_bytes;
  using sluice::weights::dtype_from;
  const std::vector<std::pair<std::string_view, std::size_t>> bits{
      {"BOOL", 8},          {"F4", 4},           {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},   {"I8", 8},
      {"F8_E5M2", 8},       {"F8_E4M3", 8},      {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8},
      {"I16", 16},          {"U16", 16},         {"F16", 16},    {"BF16", 16},   {"I32", 32}, {"U32", 32},
      {"F32", 32},          {"C64", 64},         {"F64", 64},    {"I64", 64},    {"U64", 64}};
  for (const auto& [name, b] : bits) {
    const auto dtype = dtype_from(name);
    ASSERT_TRUE(dtype.has_value()) << name;
    EXPECT_EQ(sluice::weights::to_string(*dtype), name);
    EXPECT_EQ(dtype_bits(*dtype), b) << name;
  }
  EXPECT_FALSE(dtype_from("f32").has_value());
  EXPECT_FALSE(dtype_from("F8").has_value());
  EXPECT_EQ(dtype_bytes(DType::F8_E4M3), 1u);
  EXPECT_EQ(dtype_bytes(DType::BF16), 2u);
  EXPECT_EQ(dtype_bytes(DType::C64), 8u);
  EXPECT_THROW(dtype_bytes(DType::F4), std::invalid_argument);
}

TEST(SafetensorsHeader, ReadsAFile) {
  const sluice::test::ScratchDir dir;
  const std::string path = (dir / "model.safetensors").string();
  const Bytes file = valid_file();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
  expect_valid(sluice::weights::read_safetensors_header(path));
}

TEST(SafetensorsHeader, ReadingNamesTheFile) {
  const sluice::test::ScratchDir dir;
  const std::string path = (dir / "cut.safetensors").string();
  const Bytes file = valid_file();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(file.data()), 240);  // 8 of w's 12 bytes
  try {
    sluice::weights::read_safetensors_header(path);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(path + ": truncated", 0), 0u) << message;
    EXPECT_NE(message.find("'w'"), std::string::npos) << message;
  }
  std::ofstream(path, std::ios::binary).write("\x10\0\0", 3);
  EXPECT_THROW(sluice::weights::read_safetensors_header(path), std::invalid_argument);
  EXPECT_THROW(sluice::weights::read_safetensors_header((dir / "absent").string()), sluice::IoError);
}

}  // namespace
