// A checkpoint's header and its tensors' bytes are read apart: a file renamed
// over the path between the two (a concurrent save, a checkpoint rotated by
// another job) must not have its bytes loaded at the old file's offsets, and a
// file written while it is read must not be taken as read (issue 48). The
// header's read records which file it read; read_file_ranges refuses any
// other, and a file whose size or modification time changed while it read it.
// Host-only, on the host executor.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "io/file_ranges.hpp"
#include "ring/host_ring_executor.hpp"
#include "scratch_dir.hpp"
#include "sluice/core/io_error.hpp"
#include "weights/safetensors_header.hpp"

namespace sluice::test {

namespace {

using namespace sluice::ring;

constexpr std::byte poison{0xA5};
constexpr std::size_t tensor_bytes = 5 * 4096;

// A checkpoint of one U8 tensor whose bytes are all `fill`.
void write_checkpoint(const std::filesystem::path& path, char fill) {
  const std::string header = R"({"w":{"dtype":"U8","shape":[)" + std::to_string(tensor_bytes) +
                             R"(],"data_offsets":[0,)" + std::to_string(tensor_bytes) + "]}}";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  file += header + std::string(tensor_bytes, fill);
  std::ofstream(path, std::ios::binary).write(file.data(), static_cast<std::streamsize>(file.size()));
}

// A new checkpoint, as a saver writes one: beside the path, then renamed over it.
void replace_by_rename(const std::filesystem::path& path, char fill) {
  const auto beside = path.string() + ".tmp";
  write_checkpoint(beside, fill);
  std::filesystem::rename(beside, path);
}

void set_mtime(const std::filesystem::path& path, std::int64_t seconds) {
  const timespec times[2] = {{seconds, 0}, {seconds, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

MakeExecutor host_lanes(std::function<void(HostRingExecutor&)> setup = {}) {
  return [setup](std::size_t lane) {
    auto e = std::make_shared<HostRingExecutor>(HostRingOptions{0, 1 + lane});
    if (setup) setup(*e);
    return e;
  };
}

struct Load {
  weights::SafetensorsHeader header;
  std::vector<std::byte> to = std::vector<std::byte>(tensor_bytes, poison);
  FileRange range() { return {header.tensors.at(0).begin, tensor_bytes, to.data()}; }
  std::size_t bytes_equal_to(char fill) const {
    std::size_t n = 0;
    for (const std::byte b : to) n += b == static_cast<std::byte>(fill);
    return n;
  }
};

}  // namespace

TEST(FileIdentity, ReadingAHeaderRecordsWhichFileItWas) {
  const ScratchDir dir;
  const auto path = dir / "m.safetensors";
  write_checkpoint(path, 'a');
  const auto header = weights::read_safetensors_header(path.string());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  ASSERT_TRUE(header.file.has_value());
  EXPECT_EQ(header.file->device, static_cast<std::uint64_t>(st.st_dev));
  EXPECT_EQ(header.file->inode, static_cast<std::uint64_t>(st.st_ino));
  EXPECT_EQ(header.file->size, static_cast<std::uint64_t>(st.st_size));
  EXPECT_EQ(header.file->mtime_ns, std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec);
  // Parsed from bytes, a header names no file.
  std::vector<std::byte> bytes(header.data_begin);
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  EXPECT_FALSE(weights::parse_safetensors_header(bytes, header.file_bytes).file.has_value());
}

TEST(FileIdentity, AFileRenamedOverThePathAfterItsHeaderWasReadIsRefusedBeforeAByteIsWritten) {
  const ScratchDir dir;
  const auto path = dir / "m.safetensors";
  write_checkpoint(path, 'a');
  Load load{weights::read_safetensors_header(path.string())};
  replace_by_rename(path, 'b');  // the same size, the same header, other bytes
  const FileRange range = load.range();
  // Without the header's file to hold it to, the read takes the new file's bytes at the old
  // file's offsets, silently (what load_checkpoint and sluice.load_file did before).
  read_file_ranges(path, {&range, 1}, host_lanes(), {.chunk_bytes = 4096});
  EXPECT_EQ(load.bytes_equal_to('b'), tensor_bytes);
  load.to.assign(tensor_bytes, poison);
  try {
    read_file_ranges(path, {&range, 1}, host_lanes(), {.chunk_bytes = 4096, .expected_file = load.header.file});
    FAIL() << "the replaced file was read";
  } catch (const IoError& e) {
    EXPECT_EQ(e.path(), path.string());
    EXPECT_NE(std::string(e.what()).find("was replaced or changed after its header was read"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("inode"), std::string::npos) << e.what();
  }
  EXPECT_EQ(load.bytes_equal_to(static_cast<char>(poison)), tensor_bytes) << "bytes were written";
}

TEST(FileIdentity, AFileChangedInPlaceAfterItsHeaderWasReadIsRefused) {
  const ScratchDir dir;
  const auto path = dir / "m.safetensors";
  write_checkpoint(path, 'a');
  set_mtime(path, 1'000'000'000);
  Load load{weights::read_safetensors_header(path.string())};
  const FileRange range = load.range();
  // The same inode and size, written again: its modification time moved.
  std::fstream(path, std::ios::binary | std::ios::in | std::ios::out).seekp(-1, std::ios::end).put('z');
  set_mtime(path, 1'000'000'007);
  EXPECT_THROW(read_file_ranges(path, {&range, 1}, host_lanes(), {.chunk_bytes = 4096, .expected_file = load.header.file}),
               IoError);
  // Grown: its size moved.
  write_checkpoint(path, 'a');
  load.header = weights::read_safetensors_header(path.string());
  std::ofstream(path, std::ios::binary | std::ios::app).put('+');
  try {
    read_file_ranges(path, {&range, 1}, host_lanes(), {.chunk_bytes = 4096, .expected_file = load.header.file});
    FAIL() << "the grown file was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("size"), std::string::npos) << e.what();
  }
  EXPECT_EQ(load.bytes_equal_to(static_cast<char>(poison)), tensor_bytes) << "bytes were written";
  // Unchanged, it reads.
  write_checkpoint(path, 'a');
  load.header = weights::read_safetensors_header(path.string());
  read_file_ranges(path, {&range, 1}, host_lanes(), {.chunk_bytes = 4096, .expected_file = load.header.file});
  EXPECT_EQ(load.bytes_equal_to('a'), tensor_bytes);
}

TEST(FileIdentity, AFileWrittenWhileItIsReadIsRefusedAfterTheReads) {
  const ScratchDir dir;
  const auto path = dir / "m.safetensors";
  for (const bool grow : {true, false}) {
    write_checkpoint(path, 'a');
    set_mtime(path, 1'000'000'000);
    Load load{weights::read_safetensors_header(path.string())};
    const FileRange range = load.range();
    // Just before chunk 2 is read (the edge filter is asked about each stage's edges before it
    // runs), a writer appends to the file, or writes a byte in place.
    std::atomic<int> calls = 0;
    const auto write_during_the_read = [&](HostRingExecutor& e) {
      e.ignore_edges([&, grow](const RingOp& op, const RingEdge&) {
        if (op.ref.step == Step::stage && op.ref.position == 2 && calls++ == 0) {
          if (grow) std::ofstream(path, std::ios::binary | std::ios::app).put('+');
          else std::fstream(path, std::ios::binary | std::ios::in | std::ios::out).seekp(-1, std::ios::end).put('z');
          set_mtime(path, 1'000'000'009);
        }
        return true;
      });
    };
    try {
      read_file_ranges(path, {&range, 1}, host_lanes(write_during_the_read),
                       {.chunk_bytes = 4096, .threads = 1, .expected_file = load.header.file});
      FAIL() << "a file written while it was read was taken (grow: " << grow << ")";
    } catch (const IoError& e) {
      EXPECT_EQ(e.path(), path.string());
      EXPECT_NE(std::string(e.what()).find("changed while it was being read"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(grow ? "size" : "modification time"), std::string::npos) << e.what();
    }
    EXPECT_EQ(calls.load(), 1);
  }
}

}  // namespace sluice::test
