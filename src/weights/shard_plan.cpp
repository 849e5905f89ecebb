#include "weights/shard_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace sluice::weights {

namespace {

std::uint64_t round_up(std::uint64_t n, std::uint64_t align) { return (n + align - 1) / align * align; }

}  // namespace

GatherPlan::GatherPlan(std::vector<ShardedFile> files, std::size_t ranks, std::size_t align)
    : files_(std::move(files)), ranks_(ranks) {
  if (ranks == 0) throw std::invalid_argument("sharded load: no ranks");
  if (align == 0 || (align & (align - 1)) != 0)
    throw std::invalid_argument(fmt::format("sharded load: an alignment of {} is not a power of two", align));
  // Far below any wrap: a buffer of 2^62 bytes is beyond every GPU.
  constexpr std::uint64_t most = std::uint64_t{1} << 62;
  std::uint64_t end = 0;
  for (const ShardedFile& f : files_) {
    end = round_up(end, align);
    file_at_.push_back(end);
    if (f.data_bytes > most - end) throw std::invalid_argument("sharded load: files of more than 2^62 bytes in all");
    end += f.data_bytes;
  }
  share_ = round_up((end + ranks - 1) / ranks, align);
  if (share_ > most / ranks) throw std::invalid_argument("sharded load: a buffer of more than 2^62 bytes");
}

std::vector<ShardRead> GatherPlan::reads(std::size_t rank) const {
  if (rank >= ranks_) throw std::invalid_argument(fmt::format("sharded load: rank {} of {}", rank, ranks_));
  const std::uint64_t from = rank * share_, to = from + share_;
  std::vector<ShardRead> out;
  for (std::size_t k = 0; k < files_.size(); ++k) {
    const std::uint64_t begin = std::max(from, file_at_[k]), end = std::min(to, file_at_[k] + files_[k].data_bytes);
    if (begin >= end) continue;
    out.push_back({k, files_[k].data_begin + (begin - file_at_[k]), end - begin, begin});
  }
  return out;
}

TensorPart part_of(const SplitTensor& t, std::size_t rank) {
  if (t.dim >= t.shape.size())
    throw std::invalid_argument(fmt::format("sharded load: dimension {} of a tensor of {} dimensions", t.dim, t.shape.size()));
  if (t.parts == 0) throw std::invalid_argument("sharded load: a tensor split into no parts");
  if (t.element_bytes == 0) throw std::invalid_argument("sharded load: elements of no bytes");
  for (std::int64_t d : t.shape)
    if (d < 0) throw std::invalid_argument(fmt::format("sharded load: a dimension of {}", d));
  if (rank >= t.parts) throw std::invalid_argument(fmt::format("sharded load: part {} of {}", rank, t.parts));
  // torch.chunk: ceil(n / parts) indices each, in order, the last ones shorter or empty.
  const auto n = static_cast<std::uint64_t>(t.shape[t.dim]);
  const std::uint64_t chunk = (n + t.parts - 1) / t.parts;
  const std::uint64_t first = std::min(n, rank * chunk), last = std::min(n, first + chunk);
  TensorPart part;
  part.shape = t.shape;
  part.shape[t.dim] = static_cast<std::int64_t>(last - first);
  // Below the split dimension every index is contiguous: a run of inner bytes each.
  std::uint64_t inner = t.element_bytes, outer = 1;
  for (std::size_t d = t.dim + 1; d < t.shape.size(); ++d) inner *= static_cast<std::uint64_t>(t.shape[d]);
  for (std::size_t d = 0; d < t.dim; ++d) outer *= static_cast<std::uint64_t>(t.shape[d]);
  const std::uint64_t run = (last - first) * inner;
  if (run == 0) return part;
  for (std::uint64_t o = 0; o < outer; ++o)
    part.reads.push_back({t.file, t.offset + (o * n + first) * inner, run, o * run});
  return part;
}

}  // namespace sluice::weights
