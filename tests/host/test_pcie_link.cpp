#include "core/pcie_link.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace {
class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("sluice_sysfs_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    dir_ = root_ / "bus/pci/devices/0000:3b:00.0";
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text << "\n"; }
  fs::path root_, dir_;
};
}  // namespace

TEST_F(FakeSysfs, ReadsLinkWithUppercaseBusId) {
  write("current_link_speed", "32.0 GT/s PCIe");
  write("current_link_width", "16");
  write("max_link_speed", "32.0 GT/s PCIe");
  write("max_link_width", "16");
  auto link = sluice::read_pcie_link("0000:3B:00.0", root_);
  ASSERT_TRUE(link.has_value());
  EXPECT_EQ(link->current_speed, "32.0 GT/s PCIe");
  EXPECT_EQ(link->current_width, 16);
  EXPECT_EQ(link->max_width, 16);
  EXPECT_NEAR(link->theoretical_gbps(), 63.0, 0.1);  // Gen5 x16, 128b/130b
}

TEST_F(FakeSysfs, OldEncodingForGen2) {
  write("current_link_speed", "5.0 GT/s PCIe");
  write("current_link_width", "8");
  auto link = sluice::read_pcie_link("0000:3b:00.0", root_);
  ASSERT_TRUE(link.has_value());
  EXPECT_NEAR(link->theoretical_gbps(), 4.0, 1e-9);  // 5 GT/s x8 at 8b/10b
}

TEST_F(FakeSysfs, MissingOrUnknownLinkIsAbsent) {
  EXPECT_FALSE(sluice::read_pcie_link("0000:3b:00.0", root_).has_value());
  write("current_link_speed", "Unknown");
  write("current_link_width", "0");
  EXPECT_FALSE(sluice::read_pcie_link("0000:3b:00.0", root_).has_value());
  EXPECT_FALSE(sluice::read_pcie_link("0000:ff:00.0", root_).has_value());
}
