#pragma once
// A safetensors checkpoint read onto a GPU: every tensor in one device
// allocation, laid out as the file lays them out, at the speed of the slower
// of the storage and the link (Python: sluice.load_file).
//
//   sluice::Checkpoint ckpt = sluice::load_checkpoint("model.safetensors");
//   const sluice::CheckpointTensor& w = ckpt.at("lm_head.weight");   // "BF16", {50304, 768}
//   my_kernel<<<blocks, threads, 0, stream>>>(ckpt.data(w), ...);
//
// The header is read and checked before any device memory is taken. The file
// is cut into chunks, and lanes - a thread and a copy stream each - pread the
// next chunk no lane has taken into page-locked slots while their streams
// carry the ones before to the device; the file crosses host memory once.
// A lane polls for its slot's copy rather than sleeping: the lanes keep their
// cores busy while the load runs.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>


namespace sluice {

struct CheckpointTensor {
  std::string name;
  std::string dtype;                // the format's name: "BF16", "F32", "F8_E4M3", ...
  std::vector<std::int64_t> shape;  // [] for a scalar
  std::uint64_t offset = 0;         // in Checkpoint::memory
  std::uint64_t bytes = 0;
};

struct CheckpointOptions {
  std::optional<int> device = std::nullopt;         // none: the calling thread's current device
  // Bytes a lane reads at once; a multiple of 4096. 4 MiB: in three runs on H100 hosts a 2.49 GB
  // file loaded from the page cache in 54-56 ms with 4 MiB chunks against 57-59 with 2 MiB, and in
  // the one run that tried them, 71 with 8 or 16 MiB (docs/measurements.md, sluice.load_file).
  std::size_t chunk_bytes = std::size_t{4} << 20;
  unsigned threads = 0;                             // lanes; 0: 12, or all cores but two where fewer
  // O_DIRECT skips the page cache: faster for a file that is not cached and
  // will not be read again, slower for one that is. automatic takes it when
  // less than half of the file's data is in the page cache (a sample of its pages).
  enum class Direct { automatic, yes, no } direct = Direct::automatic;
};

// The device memory of a loaded checkpoint: freed with cudaFree on its own
// device when the last copy goes, from any thread, whatever device is current
// there (cudaFree waits for the device's work first).
class CheckpointMemory {
 public:
  CheckpointMemory() = default;
  // `data`'s deleter frees it on `device` (load_checkpoint makes it so).
  CheckpointMemory(std::shared_ptr<std::byte> data, std::size_t size, int device)
      : data_(std::move(data)), size_(size), device_(device) {}
  std::byte* data() noexcept { return data_.get(); }
  const std::byte* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  int device() const noexcept { return device_; }

 private:
  std::shared_ptr<std::byte> data_;
  std::size_t size_ = 0;
  int device_ = 0;
};

struct Checkpoint {
  std::vector<CheckpointTensor> tensors;  // in file order
  std::map<std::string, std::string> metadata;
  // Every tensor's bytes, as the file holds them: tensors lie end to end, so
  // one allocation holds them all, on memory.device().
  CheckpointMemory memory;

  // std::out_of_range naming the tensor when there is none of that name.
  const CheckpointTensor& at(std::string_view name) const;
  std::byte* data(const CheckpointTensor& t) { return memory.data() + t.offset; }
  const std::byte* data(const CheckpointTensor& t) const { return memory.data() + t.offset; }
};

// Reads the safetensors file at `path` onto the device and returns once every
// byte is there: any stream may use the memory at once. Refuses, before any
// device memory is taken: bad options (std::invalid_argument), a file that
// cannot be read (IoError) and a header the format does not allow - truncated,
// offsets that overlap, leave a hole or run past the end, an unknown dtype
// (std::invalid_argument naming the file and the tensor). A read that fails
// midway is an IoError naming the file and the offset; a copy that fails, a
// std::runtime_error naming the file and the chunk.
Checkpoint load_checkpoint(const std::filesystem::path& path, const CheckpointOptions& options = {});

}  // namespace sluice
