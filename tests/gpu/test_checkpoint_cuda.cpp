// load_checkpoint on a GPU, over safetensors files written here byte by byte:
// every tensor's bytes, name, dtype, shape and offset come back as written,
// through the page cache and with O_DIRECT; bad files and bad options are
// refused before any read; a file of no tensors gives an empty Checkpoint.
#include "sluice/weights/checkpoint.hpp"

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/io_error.hpp"

namespace sluice::test {

namespace {

struct Spec {
  std::string name, dtype, shape;  // shape as the header writes it
  std::uint64_t bytes;
};

// Several dtypes and sizes, some not a multiple of any chunk, one of no
// elements and a scalar: 3.5 MiB, dozens of 64 KiB chunks over several lanes.
const std::vector<Spec> specs{
    {"embed", "BF16", "[1024,1000]", 2048000}, {"norm", "F32", "[1000]", 4000},    {"ids", "I64", "[3,7]", 168},
    {"empty", "F16", "[0,4]", 0},             {"scale", "F64", "[]", 8},          {"codes", "U8", "[1500001]", 1500001},
};

std::byte data_byte(std::uint64_t at) { return static_cast<std::byte>((at * 167 + (at >> 11) * 13 + 5) & 0xff); }

// A file of 8 little-endian bytes of the header's size, the JSON header, then the data.
struct SafetensorsFile {
  std::filesystem::path path;
  std::uint64_t data_begin = 0;
  std::vector<std::byte> data;

  SafetensorsFile(const std::string& stem, const std::vector<Spec>& tensors, const std::string& metadata) {
    path = std::filesystem::temp_directory_path() / ("sluice-checkpoint-" + stem + "-" + std::to_string(::getpid()) + ".safetensors");
    std::string header = "{";
    if (!metadata.empty()) header += R"("__metadata__":)" + metadata;
    std::uint64_t at = 0;
    for (const Spec& t : tensors) {
      if (header.size() > 1) header += ",";
      header += "\"" + t.name + R"(":{"dtype":")" + t.dtype + R"(","shape":)" + t.shape + R"(,"data_offsets":[)" +
                std::to_string(at) + "," + std::to_string(at + t.bytes) + "]}";
      at += t.bytes;
    }
    header += "}   ";  // padding, as writers add, so the data starts at no particular alignment
    data_begin = 8 + header.size();
    data.resize(at);
    for (std::uint64_t k = 0; k < at; ++k) data[k] = data_byte(k);
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header.size() >> (8 * i)) & 0xff));
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  ~SafetensorsFile() { std::filesystem::remove(path); }
};

std::vector<std::byte> to_host(const Checkpoint& c) {
  std::vector<std::byte> back(c.memory.size());
  if (!back.empty()) SLUICE_CUDA_CHECK(cudaMemcpy(back.data(), c.memory.data(), back.size(), cudaMemcpyDeviceToHost));
  return back;
}

CheckpointOptions small_chunks(CheckpointOptions::Direct direct) {
  return {.chunk_bytes = std::size_t{64} << 10, .threads = 4, .direct = direct};
}

}  // namespace

class CheckpointCuda : public GpuTest {};

TEST_F(CheckpointCuda, EveryTensorComesBackAsTheFileHasIt) {
  const SafetensorsFile file("tensors", specs, R"({"format":"pt","step":"1200"})");
  const Checkpoint c = load_checkpoint(file.path, small_chunks(CheckpointOptions::Direct::no));
  EXPECT_EQ(c.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"step", "1200"}}));
  ASSERT_EQ(c.tensors.size(), specs.size());
  const std::vector<std::vector<std::int64_t>> shapes{{1024, 1000}, {1000}, {3, 7}, {0, 4}, {}, {1500001}};
  std::uint64_t offset = 0;
  for (std::size_t k = 0; k < specs.size(); ++k) {
    const CheckpointTensor& t = c.tensors[k];
    EXPECT_EQ(t.name, specs[k].name);
    EXPECT_EQ(t.dtype, specs[k].dtype) << t.name;
    EXPECT_EQ(t.shape, shapes[k]) << t.name;
    EXPECT_EQ(t.offset, offset) << t.name;
    EXPECT_EQ(t.bytes, specs[k].bytes) << t.name;
    EXPECT_EQ(c.data(t), c.memory.data() + offset) << t.name;
    offset += specs[k].bytes;
  }
  ASSERT_EQ(c.memory.size(), file.data.size());
  EXPECT_TRUE(to_host(c) == file.data) << "the device's bytes differ from the file's";

  EXPECT_EQ(&c.at("ids"), &c.tensors[2]);
  try {
    (void)c.at("lm_head.weight");
    ADD_FAILURE() << "at() found a tensor the file does not have";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointCuda, DirectAndThePageCacheGiveTheSameBytes) {
  const SafetensorsFile file("direct", specs, "");
  using Direct = CheckpointOptions::Direct;
  for (const Direct direct : {Direct::yes, Direct::no, Direct::automatic}) {
    const Checkpoint c = load_checkpoint(file.path, small_chunks(direct));
    EXPECT_TRUE(to_host(c) == file.data) << "direct " << static_cast<int>(direct);
  }
  // The defaults, on the current device named or not.
  EXPECT_TRUE(to_host(load_checkpoint(file.path)) == file.data);
  const Checkpoint on0 = load_checkpoint(file.path, {.device = 0});
  EXPECT_EQ(on0.memory.device(), 0);
  EXPECT_TRUE(to_host(on0) == file.data);
}

TEST_F(CheckpointCuda, ATruncatedFileIsRefusedBeforeAnyRead) {
  const SafetensorsFile file("truncated", specs, "");
  std::filesystem::resize_file(file.path, file.data_begin + file.data.size() - 1);
  try {
    (void)load_checkpoint(file.path);
    ADD_FAILURE() << "a truncated file was loaded";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(file.path.string()), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)load_checkpoint(file.path.string() + ".missing"), IoError);
}

TEST_F(CheckpointCuda, BadOptionsAreRefused) {
  const SafetensorsFile file("options", specs, "");
  EXPECT_THROW((void)load_checkpoint(file.path, {.chunk_bytes = 0}), std::invalid_argument);
  EXPECT_THROW((void)load_checkpoint(file.path, {.chunk_bytes = 65536 + 512}), std::invalid_argument);
  EXPECT_THROW((void)load_checkpoint(file.path, {.device = 4096}), std::invalid_argument);
  EXPECT_THROW((void)load_checkpoint(file.path, {.direct = static_cast<CheckpointOptions::Direct>(7)}),
               std::invalid_argument);
  EXPECT_TRUE(to_host(load_checkpoint(file.path)) == file.data) << "a refusal left the device unusable";
}

// The memory is the caller's from any thread: read and let go on another one.
TEST_F(CheckpointCuda, ACheckpointIsReadAndFreedOnAnotherThread) {
  const SafetensorsFile file("thread", specs, "");
  Checkpoint c = load_checkpoint(file.path);
  std::vector<std::byte> seen;
  std::thread([&seen, moved = std::move(c)]() mutable {
    seen = to_host(moved);
    moved = Checkpoint{};  // the last holder: freed here
  }).join();
  EXPECT_TRUE(seen == file.data);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_TRUE(to_host(load_checkpoint(file.path)) == file.data) << "the device is still usable";
}

TEST_F(CheckpointCuda, AFileOfNoTensorsGivesAnEmptyCheckpoint) {
  const SafetensorsFile none("none", {}, R"({"format":"pt"})");
  const Checkpoint c = load_checkpoint(none.path);
  EXPECT_TRUE(c.tensors.empty());
  EXPECT_TRUE(c.memory.empty());
  EXPECT_EQ(c.metadata.at("format"), "pt");

  const SafetensorsFile empty("empty", {{"e", "F32", "[0]", 0}}, "");
  const Checkpoint e = load_checkpoint(empty.path);
  ASSERT_EQ(e.tensors.size(), 1u);
  EXPECT_EQ(e.tensors[0].bytes, 0u);
  EXPECT_TRUE(e.memory.empty());
}

}  // namespace sluice::test
