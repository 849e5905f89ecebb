// A sharded checkpoint read as one (weights/sharded_checkpoint.hpp): its
// index held to its files, and every rank's share of a replicated load
// played over the real files, the shares together every tensor's bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "scratch_dir.hpp"
#include "sluice/core/io_error.hpp"
#include "weights/sharded_checkpoint.hpp"

namespace sluice::test {

namespace {

// A safetensors file of U8 tensors, each `bytes` long and filled with `seed` + its index.
void write_file(const std::filesystem::path& path, const std::vector<std::pair<std::string, std::size_t>>& tensors, int seed) {
  std::string header = "{", data;
  for (const auto& [name, bytes] : tensors) {
    header += (header.size() > 1 ? "," : "") + ("\"" + name + "\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(bytes) +
                                                "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
                                                std::to_string(data.size() + bytes) + "]}");
    for (std::size_t i = 0; i < bytes; ++i) data += static_cast<char>((seed + i) % 251);
  }
  header += "}";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  file += header + data;
  std::ofstream(path, std::ios::binary).write(file.data(), static_cast<std::streamsize>(file.size()));
}

std::string contents(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string refusal(const std::filesystem::path& index) {
  try {
    weights::read_sharded_checkpoint(index);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

struct TwoFiles {
  ScratchDir dir;
  std::filesystem::path index = dir / "model.safetensors.index.json";
  TwoFiles() {
    write_file(dir / "model-00001-of-00002.safetensors", {{"embed", 9000}, {"layer.0", 5000}}, 1);
    write_file(dir / "model-00002-of-00002.safetensors", {{"layer.1", 5000}, {"head", 12000}}, 2);
  }
  void write_index(const std::string& weight_map) const {
    std::ofstream(index) << R"({"metadata": {"total_size": 31000}, "weight_map": {)" << weight_map << "}}";
  }
};

const char* const consistent =
    R"("embed": "model-00001-of-00002.safetensors", "layer.0": "model-00001-of-00002.safetensors",
       "layer.1": "model-00002-of-00002.safetensors", "head": "model-00002-of-00002.safetensors")";

}  // namespace

TEST(ShardedCheckpoint, EveryRanksShareOfEveryFileTogetherIsTheWholeCheckpoint) {
  TwoFiles set;
  set.write_index(consistent);
  const auto ckpt = weights::read_sharded_checkpoint(set.index);
  ASSERT_EQ(ckpt.paths.size(), 2u);
  for (std::size_t ranks : {1u, 2u, 3u, 8u}) {
    const weights::GatherPlan plan(ckpt.data(), ranks);
    // Each rank reads its share from the files; the all-gather puts the shares side by side.
    std::string buffer(plan.buffer_bytes(), '\xA5');
    for (std::size_t r = 0; r < ranks; ++r)
      for (const weights::ShardRead& read : plan.reads(r)) {
        const std::string file = contents(ckpt.paths[read.file]);
        buffer.replace(read.to, read.bytes, file, read.offset, read.bytes);
      }
    for (std::size_t k = 0; k < ckpt.headers.size(); ++k) {
      const std::string file = contents(ckpt.paths[k]);
      for (const weights::TensorEntry& t : ckpt.headers[k].tensors)
        EXPECT_EQ(buffer.substr(plan.file_at(k) + (t.begin - ckpt.headers[k].data_begin), t.bytes()),
                  file.substr(t.begin, t.bytes()))
            << t.name << " with " << ranks << " ranks";
    }
  }
}

TEST(ShardedCheckpoint, AnIndexThatDisagreesWithItsFilesIsRefusedNamingTheTensor) {
  TwoFiles set;
  set.write_index(R"("embed": "model-00001-of-00002.safetensors", "layer.0": "model-00002-of-00002.safetensors",
                     "layer.1": "model-00002-of-00002.safetensors", "head": "model-00002-of-00002.safetensors")");
  EXPECT_NE(refusal(set.index).find("tensor 'layer.0' is in " + (set.dir / "model-00002-of-00002.safetensors").string() +
                                    ", says the index, but that file's header has no such tensor"),
            std::string::npos)
      << refusal(set.index);
  set.write_index(R"("embed": "model-00001-of-00002.safetensors", "layer.0": "model-00001-of-00002.safetensors",
                     "head": "model-00002-of-00002.safetensors")");
  EXPECT_NE(refusal(set.index).find("holds tensor 'layer.1', which the index does not name there"), std::string::npos)
      << refusal(set.index);
  set.write_index(consistent);
  EXPECT_EQ(refusal(set.index), "accepted");
}

TEST(ShardedCheckpoint, AFileTheIndexNamesThatIsNotThereIsAnIoError) {
  TwoFiles set;
  set.write_index(R"("embed": "model-00001-of-00002.safetensors", "more": "model-00003-of-00002.safetensors")");
  EXPECT_THROW(weights::read_sharded_checkpoint(set.index), IoError);
}

}  // namespace sluice::test
