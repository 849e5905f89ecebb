#include "host_alone.hpp"

#include <cstring>
#include <vector>

#include "bound/host_rates.hpp"
#include "core/streaming_copy.hpp"

namespace sluice::bench {

HostAlone::HostAlone(workloads::Problem& problem, StagingPool& pool)
    : problem_(problem), pool_(pool), ring_in_(slot_ring_bytes), ring_out_(slot_ring_bytes) {
  // Written first, so page faults stay out of the timing.
  std::memset(ring_in_.data(), 0, slot_ring_bytes);
  std::memset(ring_out_.data(), 0x11, slot_ring_bytes);
}

void HostAlone::run() {
  constexpr std::size_t ring = slot_ring_bytes;
  std::byte* const in_ring = ring_in_.data();
  const std::byte* const out_ring = ring_out_.data();
  std::vector<StagingPool::Ticket> jobs;
  for (std::size_t a = 0; a < problem_.workload().input_count(); ++a) {
    const auto* from = reinterpret_cast<const std::byte*>(problem_.input(a).data());
    jobs.push_back(pool_.submit(problem_.input(a).size_bytes(), staged_piece_bytes,
                                [=](std::size_t offset, std::size_t length) {
                                  std::memcpy(in_ring + offset % ring, from + offset, length);
                                }));
  }
  auto* to = reinterpret_cast<std::byte*>(problem_.output().data());
  jobs.push_back(pool_.submit(problem_.output().size_bytes(), staged_piece_bytes,
                              [=](std::size_t offset, std::size_t length) {
                                detail::copy_streaming(to + offset, out_ring + offset % ring, length);
                              },
                              StagingPool::Priority::urgent));
  for (auto& job : jobs) job->wait();
}

}  // namespace sluice::bench
