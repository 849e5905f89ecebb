#pragma once
// A safetensors checkpoint's tensors read into memory the caller gives: the
// one reading of a checkpoint, under load_checkpoint (one device allocation
// for all its tensors) and the Python load_file (a torch tensor each). The
// options are load_checkpoint's (sluice/weights/checkpoint.hpp), checked and
// read here alone. Host-only: the reads run on whatever ring executors
// `executors` makes, a GPU's or the host executor in CI.
#include <cstddef>
#include <filesystem>
#include <span>

#include "io/file_ranges.hpp"
#include "sluice/weights/checkpoint.hpp"
#include "weights/safetensors_header.hpp"

namespace sluice::weights {

// std::invalid_argument, before any work, for options load_checkpoint does not take.
void check(const CheckpointOptions& options);

// Whether the reads take O_DIRECT: as asked, or, with Direct::automatic,
// where less than half of the checkpoint's data is in the page cache.
bool reads_direct(const std::filesystem::path& path, const SafetensorsHeader& header, const CheckpointOptions& options);

// Reads tensor k of `header` (read from `path`) into `into[k]`: its bytes, in
// memory the executors' copies reach (unused for a tensor of no bytes). The
// reads refuse a file renamed over `path` or written since the header was
// read (an IoError before a byte is read). std::invalid_argument, before any
// work, for bad options or `into` not one address a tensor.
ring::FileReadReport read_checkpoint(const std::filesystem::path& path, const SafetensorsHeader& header,
                                     std::span<std::byte* const> into, const CheckpointOptions& options,
                                     const ring::MakeExecutor& executors);

}  // namespace sluice::weights
