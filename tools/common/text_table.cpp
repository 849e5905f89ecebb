#include "text_table.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace sluice::tools {

namespace {
bool looks_numeric(const std::string& cell) {
  if (cell.empty()) return true;
  const char c = cell.front();
  return std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.';
}
}  // namespace

TextTable::TextTable(std::vector<std::string> header) : header_(std::move(header)) {}

void TextTable::add_row(std::vector<std::string> row) {
  if (row.size() != header_.size())
    throw std::invalid_argument("table row has " + std::to_string(row.size()) + " cells, header has " +
                                std::to_string(header_.size()));
  rows_.push_back(std::move(row));
}

std::string TextTable::render() const {
  const std::size_t columns = header_.size();
  std::vector<std::size_t> width(columns);
  std::vector<bool> right(columns, !rows_.empty());
  for (std::size_t c = 0; c < columns; ++c) {
    width[c] = header_[c].size();
    for (const auto& row : rows_) {
      width[c] = std::max(width[c], row[c].size());
      if (!looks_numeric(row[c])) right[c] = false;
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < columns; ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      out += right[c] ? pad + cells[c] : cells[c] + (c + 1 < columns ? pad : "");
      if (c + 1 < columns) out += "  ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(header_);
  std::size_t total = 0;
  for (std::size_t c = 0; c < columns; ++c) total += width[c] + (c + 1 < columns ? 2 : 0);
  out += std::string(total, '-') + "\n";
  for (const auto& row : rows_) out += line(row);
  return out;
}

}  // namespace sluice::tools
