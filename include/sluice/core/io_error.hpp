#pragma once
// A file that could not be opened, read or written, as the file sources and
// sinks and the loaders report it. Host-only.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace sluice {

// Names the file and the offset.
class IoError : public std::runtime_error {
 public:
  IoError(std::string path, std::uint64_t offset, const std::string& what);
  // The same failure with context put in front, e.g. "chunk 7 of 20 (items ...), stage stage-in".
  IoError(const IoError& cause, const std::string& context);
  const std::string& path() const noexcept { return path_; }
  std::uint64_t offset() const noexcept { return offset_; }

 private:
  std::string path_;
  std::uint64_t offset_;
};

}  // namespace sluice
