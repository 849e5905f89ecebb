#pragma once
// A sharded checkpoint as one: its index (model.safetensors.index.json) and
// every file it names, each header read and checked, the index held to
// what the files hold. What a sharded load plans from (shard_plan.hpp).
// Host-only.
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "weights/safetensors_header.hpp"
#include "weights/safetensors_index.hpp"
#include "weights/shard_plan.hpp"

namespace sluice::weights {

struct ShardedCheckpoint {
  SafetensorsIndex index;
  std::vector<std::filesystem::path> paths;     // index.files, in the index's directory
  std::vector<SafetensorsHeader> headers;       // each file's, read and checked
  // The files' data sections, for GatherPlan.
  std::vector<ShardedFile> data() const;
};

// Reads the index at `index_path` and the header of every file it names (in
// its directory). std::invalid_argument naming the file and the tensor where
// the index and the files disagree: a tensor the index puts in a file whose
// header does not hold it, or a tensor a file holds that the index does not
// name (a load would leave it out, or find it twice). IoError for a file that
// cannot be read.
ShardedCheckpoint read_sharded_checkpoint(const std::filesystem::path& index_path);

}  // namespace sluice::weights
