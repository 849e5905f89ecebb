#include "sluice/core/io_error.hpp"

#include <utility>

namespace sluice {

IoError::IoError(std::string path, std::uint64_t offset, const std::string& what)
    : std::runtime_error(path + ": " + what), path_(std::move(path)), offset_(offset) {}

IoError::IoError(const IoError& cause, const std::string& context)
    : std::runtime_error(context + ": " + cause.what()), path_(cause.path_), offset_(cause.offset_) {}

}  // namespace sluice
