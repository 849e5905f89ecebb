#include "sluice/core/byte_size.hpp"

#include <gtest/gtest.h>

using sluice::format_bytes;
using sluice::parse_bytes;

TEST(ByteSize, ParsesUnitsAsBinary) {
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("64KiB"), 64u << 10);
  EXPECT_EQ(parse_bytes("64 kb"), 64u << 10);
  EXPECT_EQ(parse_bytes("256M"), 256u << 20);
  EXPECT_EQ(parse_bytes("1GiB"), std::size_t{1} << 30);
  EXPECT_EQ(parse_bytes("1.5K"), 1536u);
  EXPECT_EQ(parse_bytes("2T"), std::size_t{2} << 40);
  EXPECT_EQ(parse_bytes("7B"), 7u);
}

TEST(ByteSize, RejectsWhatIsNotASize) {
  for (const char* bad : {"", "abc", "-1", "12XB", "1.3B", "1 GiBs", "0.1"})
    EXPECT_THROW(parse_bytes(bad), std::invalid_argument) << bad;
}

TEST(ByteSize, Formats) {
  EXPECT_EQ(format_bytes(64 << 10), "64 KiB");
  EXPECT_EQ(format_bytes(std::size_t{1} << 30), "1 GiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(3), "3 B");
}
