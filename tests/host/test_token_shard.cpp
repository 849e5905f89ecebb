#include "sluice/loader/token_shard.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "sluice/loader/token_windows.hpp"

using sluice::ShardError;

namespace {

class Shards : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice-shards-" + std::to_string(getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // A header with the given words, then `payload` bytes.
  std::string raw(const std::string& name, std::int32_t magic, std::int32_t version, std::int32_t count, std::size_t payload) {
    std::vector<std::int32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    std::ofstream out(path(name), std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    const std::string bytes(payload, '\x01');
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path(name);
  }
  std::string error_of(const std::vector<std::string>& files) {
    try {
      sluice::open_shards(files);
    } catch (const ShardError& e) {
      return e.what();
    }
    return "";
  }
  std::filesystem::path dir_;
};

}  // namespace

TEST_F(Shards, WritesAndReadsBothWidths) {
  std::vector<std::uint32_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint32_t>(i * 37 % 50257);
  sluice::write_shard(path("a.bin"), tokens, 2);
  sluice::write_shard(path("b.bin"), tokens, 4);
  const auto narrow = sluice::open_shards({path("a.bin")});
  ASSERT_EQ(narrow.size(), 1u);
  EXPECT_EQ(narrow[0].tokens, 1000u);
  EXPECT_EQ(narrow[0].token_bytes, 2u);
  EXPECT_EQ(std::filesystem::file_size(path("a.bin")), 1024u + 2000u);
  EXPECT_EQ(sluice::open_shards({path("b.bin")})[0].token_bytes, 4u);
}

TEST_F(Shards, GlobsExpandInSortedOrder) {
  std::vector<std::uint32_t> t(10, 7);
  for (const char* name : {"train_002.bin", "train_000.bin", "train_001.bin", "val_000.bin"}) sluice::write_shard(path(name), t, 2);
  const auto shards = sluice::open_shards({path("train_*.bin")});
  ASSERT_EQ(shards.size(), 3u);
  EXPECT_NE(shards[0].path.find("train_000"), std::string::npos);
  EXPECT_NE(shards[2].path.find("train_002"), std::string::npos);
  EXPECT_NE(error_of({path("nothing_*.bin")}).find("no file matches"), std::string::npos);
}

TEST_F(Shards, EveryBadHeaderIsNamed) {
  const std::string magic = error_of({raw("magic.bin", 12345, 1, 10, 20)});
  EXPECT_NE(magic.find("magic.bin: wrong magic 12345"), std::string::npos) << magic;
  const std::string version = error_of({raw("version.bin", sluice::shard_magic_u16, 3, 10, 20)});
  EXPECT_NE(version.find("version.bin: unknown shard version 3"), std::string::npos) << version;
  const std::string truncated = error_of({raw("truncated.bin", sluice::shard_magic_u16, 1, 10, 15)});
  EXPECT_NE(truncated.find("truncated.bin: the header says 10 tokens"), std::string::npos) << truncated;
  EXPECT_NE(truncated.find("truncated"), std::string::npos) << truncated;
  const std::string longer = error_of({raw("long.bin", sluice::shard_magic_u32, 7, 10, 44)});
  EXPECT_NE(longer.find("the file is 1068 bytes"), std::string::npos) << longer;
  const std::string negative = error_of({raw("negative.bin", sluice::shard_magic_u16, 1, -4, 0)});
  EXPECT_NE(negative.find("negative token count"), std::string::npos) << negative;
  {
    std::ofstream(path("tiny.bin")) << "abc";
  }
  EXPECT_NE(error_of({path("tiny.bin")}).find("tiny.bin: 3 bytes, too short"), std::string::npos);
  EXPECT_NE(error_of({path("missing.bin")}).find("missing.bin: cannot open"), std::string::npos);
  // uint32 shards written by llm.c say version 7.
  EXPECT_EQ(error_of({raw("llama.bin", sluice::shard_magic_u32, 7, 10, 40)}), "");
}

TEST_F(Shards, MixedWidthsAreRefused) {
  std::vector<std::uint32_t> t(10, 1);
  sluice::write_shard(path("a.bin"), t, 2);
  sluice::write_shard(path("b.bin"), t, 4);
  EXPECT_NE(error_of({path("a.bin"), path("b.bin")}).find("one token width"), std::string::npos);
}

TEST_F(Shards, WindowsStayInsideShardsAndOverlapByOneToken) {
  std::vector<std::uint32_t> a(101, 1), b(50, 2);  // windows of T=10 need 11 tokens: 10 in a, 4 in b
  sluice::write_shard(path("a.bin"), a, 2);
  sluice::write_shard(path("b.bin"), b, 2);
  const sluice::TokenWindows windows(sluice::open_shards({path("a.bin"), path("b.bin")}), 10);
  ASSERT_EQ(windows.count(), 14u);
  EXPECT_EQ(windows.window(0).first_token, 0u);
  EXPECT_EQ(windows.window(9).first_token, 90u);  // tokens 90..100, the shard's last
  EXPECT_EQ(windows.window(10).shard, 1u);
  EXPECT_EQ(windows.window(10).first_token, 0u);
  EXPECT_EQ(windows.window(13).first_token, 30u);  // 30..40; 40..50 would need token 50
  EXPECT_THROW(windows.window(14), std::out_of_range);
}

TEST_F(Shards, AShardShorterThanOneWindowIsNamed) {
  std::vector<std::uint32_t> t(10, 1);
  sluice::write_shard(path("short.bin"), t, 2);
  try {
    sluice::TokenWindows windows(sluice::open_shards({path("short.bin")}), 10);
    FAIL() << "a shard shorter than T + 1 was accepted";
  } catch (const ShardError& e) {
    EXPECT_NE(std::string(e.what()).find("short.bin: 10 tokens, shorter than one window"), std::string::npos) << e.what();
  }
}
