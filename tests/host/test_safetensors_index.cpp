// A sharded checkpoint's index is untrusted input: it is read as
// transformers writes it, and refused, naming the file and what is wrong,
// where it names a file outside its directory, a tensor twice, or nests
// without bound.
#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>
#include <string>

#include "scratch_dir.hpp"
#include "sluice/core/io_error.hpp"
#include "weights/safetensors_index.hpp"

namespace sluice::test {

namespace {

std::string refusal(const std::string& text) {
  try {
    weights::parse_safetensors_index(text, "m.index.json");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

std::string with_file(const std::string& file) {
  return R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": )" + file + "}}";
}

}  // namespace

TEST(SafetensorsIndex, ReadsWhatTransformersWrites) {
  const auto index = weights::parse_safetensors_index(R"({
    "metadata": {"total_size": 1234, "format": {"nested": [1, 2, {"x": null}]}},
    "weight_map": {
      "lm_head.weight": "model-00002-of-00002.safetensors",
      "model.embed.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors"}})");
  ASSERT_EQ(index.files.size(), 2u);
  EXPECT_EQ(index.files[0], "model-00002-of-00002.safetensors");  // in the order first named
  ASSERT_EQ(index.tensors.size(), 3u);
  EXPECT_EQ(index.tensors[1].tensor, "model.embed.weight");
  EXPECT_EQ(index.tensors[1].file, 1u);
  EXPECT_EQ(index.tensors[2].file, 0u);
}

TEST(SafetensorsIndex, AFileOutsideTheIndexsDirectoryIsRefused) {
  for (const char* file : {R"("../secret.safetensors")", R"("/etc/passwd")", R"("sub/model.safetensors")", R"("..")",
                           R"(".")", R"("")", R"("a\\b.safetensors")", R"("new\nline.safetensors")",
                           R"("   ")", R"("del\u007f.safetensors")", R"("c1\u0085.safetensors")", R"("nul\u0000.safetensors")"}) {
    const std::string said = refusal(with_file(file));
    EXPECT_NE(said.find("m.index.json: tensor 'b' is in file"), std::string::npos) << file << ": " << said;
    EXPECT_NE(said.find("not a plain file name in the index's directory"), std::string::npos) << file << ": " << said;
  }
  EXPECT_EQ(refusal(with_file(R"("model-00002-of-00002.safetensors")")), "accepted");
}

TEST(SafetensorsIndex, WhatTheFormatDoesNotAllowIsRefusedNamingIt) {
  EXPECT_NE(refusal(R"({"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}})").find("tensor 'a' appears twice"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"metadata": {}})").find("no \"weight_map\" object"), std::string::npos);
  EXPECT_NE(refusal(R"({"weight_map": {"a": 3}})").find("tensor 'a''s file is a number, not a string"), std::string::npos);
  EXPECT_NE(refusal(R"({"weight_map": {"a": {"f": "x"}}})").find("tensor 'a''s file is an object"), std::string::npos);
  EXPECT_NE(refusal(R"({"weight_map": ["a"]})").find("\"weight_map\" is an array"), std::string::npos);
  EXPECT_NE(refusal(R"({"weight_map": {}, "weight_map": {}})").find("key 'weight_map' appears twice"), std::string::npos);
  EXPECT_NE(refusal(R"([1, 2])").find("the index is an array"), std::string::npos);
  EXPECT_NE(refusal(R"({"weight_map": null})").find("\"weight_map\" is null, not an object"), std::string::npos);
  // A weight_map inside the metadata is the metadata's: the index still has none.
  EXPECT_NE(refusal(R"({"metadata": {"weight_map": {"a": "x.safetensors"}}})").find("no \"weight_map\" object"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"weight_map": {"a": "x.safetensors"})").find("the index is not JSON"), std::string::npos);
}

TEST(SafetensorsIndex, MetadataNestedAMillionDeepIsRefusedNotFollowed) {
  const std::string deep = R"({"metadata": )" + std::string(1'000'000, '[') + std::string(1'000'000, ']') +
                           R"(, "weight_map": {}})";
  EXPECT_NE(refusal(deep).find("nests deeper than 8 levels"), std::string::npos);
}

TEST(SafetensorsIndex, AnIndexThatCannotBeReadIsAnIoError) {
  ScratchDir dir;
  EXPECT_THROW(weights::read_safetensors_index(dir / "none.json"), IoError);
  EXPECT_THROW(weights::read_safetensors_index(dir.path()), IoError);  // a directory
  std::ofstream(dir / "m.index.json") << with_file(R"("model-00002-of-00002.safetensors")");
  EXPECT_EQ(weights::read_safetensors_index(dir / "m.index.json").files.size(), 2u);
}

}  // namespace sluice::test
