#include "weights/checkpoint_read.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <vector>

namespace sluice::weights {

namespace {

// Below this share of the data's pages in the page cache, Direct::automatic reads past it.
constexpr double direct_below = 0.5;

}  // namespace

void check(const CheckpointOptions& o) {
  if (o.chunk_bytes == 0 || o.chunk_bytes % 4096 != 0)
    throw std::invalid_argument(
        fmt::format("load_checkpoint: chunk_bytes ({}) must be a positive multiple of 4096", o.chunk_bytes));
  using Direct = CheckpointOptions::Direct;
  if (o.direct != Direct::automatic && o.direct != Direct::yes && o.direct != Direct::no)
    throw std::invalid_argument("load_checkpoint: direct must be automatic, yes or no");
}

bool reads_direct(const std::filesystem::path& path, const SafetensorsHeader& header, const CheckpointOptions& options) {
  using Direct = CheckpointOptions::Direct;
  if (options.direct != Direct::automatic) return options.direct == Direct::yes;
  const std::uint64_t data_bytes = header.file_bytes - header.data_begin;
  return data_bytes > 0 && ring::cached_fraction(path, header.data_begin, data_bytes) < direct_below;
}

ring::FileReadReport read_checkpoint(const std::filesystem::path& path, const SafetensorsHeader& header,
                                     std::span<std::byte* const> into, const CheckpointOptions& options,
                                     const ring::MakeExecutor& executors) {
  check(options);
  if (into.size() != header.tensors.size())
    throw std::invalid_argument(fmt::format("read_checkpoint: {} addresses for the {} tensors of {}", into.size(),
                                            header.tensors.size(), path.string()));
  std::vector<ring::FileRange> ranges;
  for (std::size_t k = 0; k < into.size(); ++k) {
    const TensorEntry& t = header.tensors[k];
    if (t.bytes() == 0) continue;
    if (!into[k]) throw std::invalid_argument(fmt::format("read_checkpoint: no memory for tensor '{}'", t.name));
    // Tensors that follow each other in the file and in memory (load_checkpoint's one
    // allocation) are one range: a chunk is then one copy, not one a tensor.
    if (!ranges.empty() && ranges.back().offset + ranges.back().bytes == t.begin &&
        ranges.back().to + ranges.back().bytes == into[k])
      ranges.back().bytes += t.bytes();
    else
      ranges.push_back({t.begin, t.bytes(), into[k]});
  }
  if (ranges.empty()) return {};
  // The reads open the file by path again: they must find the file whose
  // header planned them, not one renamed over it since.
  return ring::read_file_ranges(path, ranges, executors,
                                {.chunk_bytes = options.chunk_bytes,
                                 .threads = options.threads,
                                 .direct = reads_direct(path, header, options),
                                 .expected_file = header.file});
}

}  // namespace sluice::weights
