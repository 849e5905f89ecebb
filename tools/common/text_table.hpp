#pragma once
// A plain aligned text table for terminals: a header row, a rule, rows.
// Numbers are formatted by the caller; this only lines columns up. Tool code.
#include <string>
#include <vector>

namespace sluice::tools {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header);
  // Throws std::invalid_argument when the row's width differs from the header's.
  void add_row(std::vector<std::string> row);
  std::size_t row_count() const { return rows_.size(); }
  // Text columns align left, columns whose cells all start like numbers align right.
  std::string render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace sluice::tools
