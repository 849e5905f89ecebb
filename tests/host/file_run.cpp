#include "file_run.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace sluice::test {

void run_file_to_file(const FileRun& run) {
  FileSource source(run.input, sizeof(std::uint32_t));
  FileSink sink(run.output, sizeof(std::uint32_t), source.item_count(), run.output_options);
  const ChunkPlan plan(source.item_count(), run.chunk_items);
  auto step = [&](std::size_t s) {
    if (run.after_step) run.after_step(s);
  };
  source.begin_run();
  sink.begin_run();
  step(0);
  std::size_t items_done = 0;
  try {
    std::vector<std::uint32_t> slot(plan.chunk_items());
    for (std::size_t c = 0; c < plan.chunk_count(); ++c) {
      const ItemRange range = plan.chunk(c);
      source.read(range, std::as_writable_bytes(std::span(slot.data(), range.size())));
      for (std::size_t i = 0; i < range.size(); ++i) slot[i] = slot[i] * 2 + 1;
      sink.write(range, std::as_bytes(std::span(slot.data(), range.size())));
      items_done = range.end;
      step(c + 1);
    }
    sink.commit();
  } catch (...) {
    sink.abandon(items_done);
    throw;
  }
  step(plan.chunk_count() + 1);
}

std::vector<std::uint32_t> transformed(const std::vector<std::uint32_t>& input) {
  std::vector<std::uint32_t> out(input.size());
  std::transform(input.begin(), input.end(), out.begin(), [](std::uint32_t x) { return x * 2 + 1; });
  return out;
}

std::vector<std::uint32_t> pattern(std::size_t items, std::uint32_t seed) {
  std::vector<std::uint32_t> v(items);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& item : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    item = x;
  }
  return v;
}

void write_items(const std::filesystem::path& path, const std::vector<std::uint32_t>& items) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(items.data()), static_cast<std::streamsize>(items.size() * sizeof(std::uint32_t)));
  if (!out.flush()) throw std::runtime_error("cannot write " + path.string());
}

std::vector<std::byte> file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::vector<std::byte> bytes(std::filesystem::file_size(path));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (in.gcount() != static_cast<std::streamsize>(bytes.size())) throw std::runtime_error("short read of " + path.string());
  return bytes;
}

std::string difference(const std::filesystem::path& path, const std::vector<std::byte>& expected) {
  if (!std::filesystem::exists(path)) return path.string() + " is missing";
  const auto got = file_bytes(path);
  if (got.size() != expected.size())
    return path.string() + " is " + std::to_string(got.size()) + " bytes, not " + std::to_string(expected.size());
  const auto at = std::mismatch(got.begin(), got.end(), expected.begin()).first;
  if (at == got.end()) return "";
  return path.string() + " differs from byte " + std::to_string(at - got.begin());
}

std::vector<std::byte> as_bytes(const std::vector<std::uint32_t>& items) {
  std::vector<std::byte> bytes(items.size() * sizeof(std::uint32_t));
  std::memcpy(bytes.data(), items.data(), bytes.size());
  return bytes;
}

std::vector<std::string> names_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace sluice::test
