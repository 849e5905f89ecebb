// load_checkpoint's reading (weights/checkpoint_read.hpp), on the host
// executor: each tensor into the memory the caller gives, its options
// checked before any work, its direct-I/O rule, and a file replaced between
// header and reads refused. What the Python load_file and load_checkpoint share.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ring/host_ring_executor.hpp"
#include "scratch_dir.hpp"
#include "sluice/core/io_error.hpp"
#include "weights/checkpoint_read.hpp"

namespace sluice::test {

namespace {

// A checkpoint of three U8 tensors: a (3000 bytes), an empty one, b (70000 bytes), each byte its index % 251 plus the tensor's start.
void write_checkpoint(const std::filesystem::path& path, char shift = 0) {
  const std::string header =
      R"({"a":{"dtype":"U8","shape":[3000],"data_offsets":[0,3000]},)"
      R"("none":{"dtype":"F32","shape":[0],"data_offsets":[3000,3000]},)"
      R"("b":{"dtype":"U8","shape":[70000],"data_offsets":[3000,73000]}})";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  file += header;
  for (std::size_t i = 0; i < 73000; ++i) file += static_cast<char>(i % 251 + shift);
  std::ofstream(path, std::ios::binary).write(file.data(), static_cast<std::streamsize>(file.size()));
}

ring::MakeExecutor host(unsigned jitter_us = 0) {
  return [jitter_us](std::size_t lane) {
    return std::make_shared<ring::HostRingExecutor>(ring::HostRingOptions{jitter_us, 1 + lane});
  };
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST(CheckpointRead, EachTensorLandsInTheMemoryGivenForIt) {
  ScratchDir dir;
  const auto path = dir / "m.safetensors";
  write_checkpoint(path);
  const auto header = weights::read_safetensors_header(path.string());
  ASSERT_EQ(header.tensors.size(), 3u);
  for (unsigned jitter : {0u, 50u}) {
    std::vector<std::byte> a(3000, std::byte{0xEE}), b(70000, std::byte{0xEE});
    const std::vector<std::byte*> into{a.data(), nullptr, b.data()};  // the empty tensor needs none
    CheckpointOptions o;
    o.chunk_bytes = 16384;  // several chunks, one shared by both tensors
    o.threads = 3;
    const auto report = weights::read_checkpoint(path, header, into, o, host(jitter));
    EXPECT_EQ(report.bytes, 73000u);
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], std::byte(i % 251)) << "a, byte " << i;
    for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], std::byte((3000 + i) % 251)) << "b, byte " << i;
  }
}

TEST(CheckpointRead, TensorsInOneAllocationLandWhereTheFileHasThem) {
  ScratchDir dir;
  const auto path = dir / "m.safetensors";
  write_checkpoint(path);
  const auto header = weights::read_safetensors_header(path.string());
  // load_checkpoint's layout: one allocation, each tensor at its offset in the data.
  std::vector<std::byte> all(73000, std::byte{0xEE});
  CheckpointOptions o;
  o.chunk_bytes = 4096;
  o.threads = 2;
  const auto report =
      weights::read_checkpoint(path, header, std::vector<std::byte*>{all.data(), all.data() + 3000, all.data() + 3000}, o, host(20));
  EXPECT_EQ(report.chunks, (73000u + 4095) / 4096);
  for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], std::byte(i % 251)) << "byte " << i;
}

TEST(CheckpointRead, BadOptionsAndAddressesAreRefusedBeforeAnyRead) {
  ScratchDir dir;
  const auto path = dir / "m.safetensors";
  write_checkpoint(path);
  const auto header = weights::read_safetensors_header(path.string());
  std::vector<std::byte> a(3000, std::byte{0xEE}), b(70000, std::byte{0xEE});
  CheckpointOptions odd;
  odd.chunk_bytes = 5000;
  EXPECT_NE(refusal([&] { weights::read_checkpoint(path, header, std::vector<std::byte*>{a.data(), nullptr, b.data()}, odd, host()); })
                .find("chunk_bytes (5000) must be a positive multiple of 4096"),
            std::string::npos);
  EXPECT_NE(refusal([&] { weights::read_checkpoint(path, header, std::vector<std::byte*>{a.data(), b.data()}, {}, host()); })
                .find("2 addresses for the 3 tensors"),
            std::string::npos);
  EXPECT_NE(refusal([&] { weights::read_checkpoint(path, header, std::vector<std::byte*>{a.data(), nullptr, nullptr}, {}, host()); })
                .find("no memory for tensor 'b'"),
            std::string::npos);
  EXPECT_EQ(a.front(), std::byte{0xEE}) << "a refused read wrote";
}

TEST(CheckpointRead, DirectIOIsTakenAsAskedOrWhereLittleOfTheFileIsCached) {
  ScratchDir dir;
  const auto path = dir / "m.safetensors";
  write_checkpoint(path);
  const auto header = weights::read_safetensors_header(path.string());
  CheckpointOptions o;
  o.direct = CheckpointOptions::Direct::yes;
  EXPECT_TRUE(weights::reads_direct(path, header, o));
  o.direct = CheckpointOptions::Direct::no;
  EXPECT_FALSE(weights::reads_direct(path, header, o));
  o.direct = CheckpointOptions::Direct::automatic;  // just written: in the page cache
  EXPECT_FALSE(weights::reads_direct(path, header, o));
}

TEST(CheckpointRead, AFileRenamedOverThePathAfterItsHeaderIsRefused) {
  ScratchDir dir;
  const auto path = dir / "m.safetensors";
  write_checkpoint(path);
  const auto header = weights::read_safetensors_header(path.string());
  write_checkpoint(dir / "new.safetensors", 7);
  std::filesystem::rename(dir / "new.safetensors", path);
  std::vector<std::byte> a(3000, std::byte{0xEE}), b(70000, std::byte{0xEE});
  try {
    weights::read_checkpoint(path, header, std::vector<std::byte*>{a.data(), nullptr, b.data()}, {}, host());
    FAIL() << "the replaced file was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("was replaced or changed after its header was read"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b.front(), std::byte{0xEE}) << "bytes of the new file were read at the old one's offsets";
}

}  // namespace sluice::test
