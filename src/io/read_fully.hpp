#pragma once
// pread until every byte asked for is in or the file ends, retrying reads a
// signal interrupted. The file source and the loaders each say in their own
// words what a short or failed read means. Host-only.
#include <cstddef>
#include <cstdint>

namespace sluice::detail {

struct ReadOutcome {
  std::size_t done = 0;  // bytes read; fewer than asked: the file ended there, or `error` is set
  int error = 0;         // errno of the read that failed; 0 when none did
};

ReadOutcome read_fully(int fd, std::byte* at, std::size_t bytes, std::uint64_t offset);

}  // namespace sluice::detail
