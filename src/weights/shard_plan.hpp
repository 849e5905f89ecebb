#pragma once
// How the ranks of a job load a checkpoint's files together, planned before
// any read as values. Host-only, so that CI checks every rank's plan.
//
// Replicated (every rank ends with every tensor): the files' data sections
// lie end to end in one device buffer on every rank, each at an aligned
// offset. The buffer is cut into `ranks` equal shares; rank r reads share r
// from storage (the file ranges it covers) into its place, and an all-gather
// over the GPUs' links fills in the other shares. Each byte crosses storage
// and one link once, and every link carries 1/ranks of the data: the load
// runs at every rank's link at once, bounded by
//   max(file bytes / storage rate, share / link rate, all-gather time).
//
// Tensor-parallel (each rank keeps a part of some tensors): a split tensor's
// part on rank r is the r-th of `parts` chunks along one dimension, as
// torch.chunk cuts it (ceil(n / parts) each, the last ones shorter or
// empty); rank r reads its part's runs of bytes straight from the file into
// a tensor of the part's shape, and no collective is needed.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::weights {

// One file's data section: where it starts in the file and its bytes.
struct ShardedFile {
  std::string path;
  std::uint64_t data_begin = 0;
  std::uint64_t data_bytes = 0;
};

// A run of bytes a rank reads: from `file` at `offset`, `bytes` of them, to `to` in its buffer.
struct ShardRead {
  std::size_t file = 0;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  std::uint64_t to = 0;
};

class GatherPlan {
 public:
  // Throws std::invalid_argument for no ranks or an alignment that is not a power of two.
  GatherPlan(std::vector<ShardedFile> files, std::size_t ranks, std::size_t align = 4096);

  std::size_t ranks() const { return ranks_; }
  const std::vector<ShardedFile>& files() const { return files_; }
  // Where file k's data starts in the buffer (aligned).
  std::uint64_t file_at(std::size_t k) const { return file_at_.at(k); }
  // Each rank's share of the buffer, a multiple of the alignment; the buffer holds ranks x share.
  std::uint64_t share() const { return share_; }
  std::uint64_t buffer_bytes() const { return share_ * ranks_; }
  // Rank r's reads, in buffer order: the file ranges share r covers (none in padding).
  std::vector<ShardRead> reads(std::size_t rank) const;

 private:
  std::vector<ShardedFile> files_;
  std::size_t ranks_;
  std::vector<std::uint64_t> file_at_;
  std::uint64_t share_ = 0;
};

// A tensor split across ranks: its shape, element size and where its bytes
// start in its file, the dimension it is split along and into how many parts.
struct SplitTensor {
  std::size_t file = 0;
  std::uint64_t offset = 0;  // in the file
  std::vector<std::int64_t> shape;
  std::size_t element_bytes = 1;
  std::size_t dim = 0;
  std::size_t parts = 1;
};

// Rank r's part: its shape, and the runs of bytes that fill it, to offsets in
// a tensor of that shape (contiguous). Throws std::invalid_argument for a
// dimension past the shape, no parts, or a rank past the parts.
struct TensorPart {
  std::vector<std::int64_t> shape;
  std::vector<ShardRead> reads;
};
TensorPart part_of(const SplitTensor& tensor, std::size_t rank);

}  // namespace sluice::weights
