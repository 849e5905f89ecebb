#include "text_table.hpp"

#include <gtest/gtest.h>

using sluice::tools::TextTable;

TEST(TextTable, AlignsNumbersRightAndTextLeft) {
  TextTable t({"name", "GB/s"});
  t.add_row({"h2d", "55.1"});
  t.add_row({"both ways", "9.0"});
  const std::string expected =
      "name       GB/s\n"
      "---------------\n"
      "h2d        55.1\n"
      "both ways   9.0\n";
  EXPECT_EQ(t.render(), expected);
}

TEST(TextTable, RejectsRaggedRows) {
  TextTable t({"a", "b"});
  EXPECT_THROW(t.add_row({"only one"}), std::invalid_argument);
  EXPECT_EQ(t.row_count(), 0u);
}

TEST(TextTable, HeaderOnly) {
  TextTable t({"a", "bb"});
  EXPECT_EQ(t.render(), "a  bb\n-----\n");
}
