#pragma once
// A file -> file run on the host, making the calls that a pipeline run with a
// file source and a file sink makes, in the pipeline's order: the source's and
// the sink's begin_run before the first chunk, each chunk read, transformed
// (y = 2x + 1 over 32-bit unsigned items) and written in chunk order, then the
// sink's commit, or its abandon when anything failed. The tests that kill a run
// midway or fill the disk under it run this in a child process; it is one
// function so that a whole pipeline run on a host executor can take its place.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sluice/pipeline/file_io.hpp"

namespace sluice::test {

struct FileRun {
  FileRun(std::filesystem::path input_file, std::filesystem::path output_file, std::size_t items_a_chunk,
          FileOptions options = {})
      : input(std::move(input_file)), output(std::move(output_file)), chunk_items(items_a_chunk), output_options(options) {}
  std::filesystem::path input;
  std::filesystem::path output;
  std::size_t chunk_items;
  FileOptions output_options;
  // Called after begin_run (step 0), after chunk c (step c + 1) and after commit (the last step).
  std::function<void(std::size_t step)> after_step;
};

// Throws what the source or sink threw, after abandoning the sink.
void run_file_to_file(const FileRun& run);

// What run_file_to_file writes for `input`.
std::vector<std::uint32_t> transformed(const std::vector<std::uint32_t>& input);

// Items that are not all alike, so that a misplaced chunk shows.
std::vector<std::uint32_t> pattern(std::size_t items, std::uint32_t seed);

void write_items(const std::filesystem::path& path, const std::vector<std::uint32_t>& items);
std::vector<std::byte> file_bytes(const std::filesystem::path& path);
// Empty when the file holds `expected`; else how it differs (its size, or the first byte that differs).
std::string difference(const std::filesystem::path& path, const std::vector<std::byte>& expected);
std::vector<std::byte> as_bytes(const std::vector<std::uint32_t>& items);

// The names in `dir`, sorted.
std::vector<std::string> names_in(const std::filesystem::path& dir);

}  // namespace sluice::test
