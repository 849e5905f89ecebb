// What each span is and how its bytes reach the device: checks before any
// work, and the per-run choice between direct copies, staging, and
// registration (HostMemoryPolicy).
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine.hpp"
#include "sluice/chunking.hpp"
#include "sluice/error.hpp"

namespace sluice {

using detail::HostPath;
using detail::SpanRecord;

namespace {

bool ranges_overlap(const SpanRecord& a, const SpanRecord& b) {
  if (a.host == nullptr || b.host == nullptr || a.bytes() == 0 || b.bytes() == 0) return false;
  return a.host < b.host + b.bytes() && b.host < a.host + a.bytes();
}

std::size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

}  // namespace

std::string detail::SpanRecord::describe(std::size_t index) const {
  std::string role_name = role == SpanRole::input ? "input" : role == SpanRole::output ? "output" : "inout";
  std::string text = "span " + std::to_string(index) + " (" + role_name;
  if (source) text += ", " + source->name();
  if (sink) text += ", " + sink->name();
  return text + ")";
}

std::size_t Pipeline::Engine::widest_item() const {
  std::size_t widest = 1;
  for (const auto& s : spans) widest = std::max(widest, s.item_bytes);
  return widest;
}

void Pipeline::Engine::validate() const {
  if (spans.empty()) throw std::invalid_argument("pipeline has no spans: add at least one input or output");
  if (!compute_fn) throw std::invalid_argument("pipeline has no compute callable (clear_spans() forgets it with the spans)");
  const std::size_t items = spans.front().items;
  for (std::size_t k = 0; k < spans.size(); ++k) {
    const SpanRecord& s = spans[k];
    if (s.items != items)
      throw std::invalid_argument(s.describe(k) + " has " + std::to_string(s.items) + " items but span 0 has " +
                                  std::to_string(items) + ": all spans must match");
    if (!s.source && !s.sink && s.host == nullptr && s.items > 0)
      throw std::invalid_argument(s.describe(k) + " is null");
  }
  for (std::size_t i = 0; i < spans.size(); ++i)
    for (std::size_t j = i + 1; j < spans.size(); ++j) {
      const bool either_written = spans[i].copied_out() || spans[j].copied_out();
      if (either_written && ranges_overlap(spans[i], spans[j]))
        throw std::invalid_argument("spans " + std::to_string(i) + " and " + std::to_string(j) +
                                    " overlap and one is written: use inout() for an in-place transform");
    }
}

ChunkPlan Pipeline::Engine::plan_chunks(std::size_t items) const {
  const auto host_copies = [this](bool in) {
    return std::any_of(spans.begin(), spans.end(), [in](const SpanRecord& s) {
      return s.host_pass() && (in ? s.copied_in() : s.copied_out());
    });
  };
  return sluice::plan_chunks(options, items, widest_item(), host_copies(true) && host_copies(false));
}

void Pipeline::Engine::classify_spans(std::vector<std::string>& notes) {
  for (std::size_t k = 0; k < spans.size(); ++k) {
    SpanRecord& s = spans[k];
    s.extents.clear();
    if (s.source) {
      s.path = HostPath::source;
      continue;
    }
    if (s.sink) {
      s.path = HostPath::sink;
      continue;
    }
    if (s.bytes() == 0) {
      s.path = HostPath::dma;
      continue;
    }
    s.extents = memory_extents(s.host, s.bytes());
    const MemoryKind first = s.extents.front().kind;
    if (first == MemoryKind::device || first == MemoryKind::managed)
      throw std::invalid_argument(s.describe(k) + " is " + std::string(to_string(first)) +
                                  " memory: the pipeline streams host memory");
    const bool locked = std::all_of(s.extents.begin(), s.extents.end(),
                                    [](const MemoryExtent& e) { return is_page_locked_host(e.kind); });
    const bool ours = s.registration && s.registration->complete();
    if (locked && !ours) {
      s.path = HostPath::dma;  // the caller's own pinned or registered memory
      continue;
    }
    const bool read_only = s.role == SpanRole::input;
    s.register_after_run = false;
    switch (options.host_memory) {
      case HostMemoryPolicy::stage: s.path = HostPath::staged; break;
      case HostMemoryPolicy::register_memory:
        if (!s.registration) {
          s.registration = std::make_unique<detail::SpanRegistration>();
          try {
            s.registration->register_now(s.host, s.bytes(), read_only, device);
          } catch (const CudaError& e) {
            s.registration.reset();
            throw std::invalid_argument(s.describe(k) + " cannot be registered (HostMemoryPolicy::register_memory): " +
                                        e.what());
          }
        }
        s.path = HostPath::dma;
        break;
      case HostMemoryPolicy::automatic:
        // Registering while a run is in flight would hold up every CUDA call
        // of the run (the driver serializes them): it happens between runs,
        // and a run that starts while it is still going waits for it.
        if (s.registration && s.registration->started()) s.registration->wait();
        if (s.registration && s.registration->complete()) {
          s.path = HostPath::dma;
          break;
        }
        s.path = HostPath::staged;
        if (!s.registration) {
          const std::size_t limit = physical_memory_bytes() / 4;
          if (limit > 0 && s.bytes() > limit) {
            notes.push_back(s.describe(k) + " stays staged: it is larger than a quarter of physical memory");
            s.registration = std::make_unique<detail::SpanRegistration>();  // marks the decision as made
          } else {
            s.register_after_run = true;
          }
        } else if (const std::string why = s.registration->failure(); !why.empty()) {
          notes.push_back(s.describe(k) + " stays staged: registering it failed: " + why);
        }
        break;
    }
    if (s.path == HostPath::dma) {
      s.extents = memory_extents(s.host, s.bytes());
      // A neighbour's registration that this span leaned on may have gone (rebind): stage what is not locked.
      if (!std::all_of(s.extents.begin(), s.extents.end(), [](const MemoryExtent& e) { return is_page_locked_host(e.kind); }))
        s.path = HostPath::staged;
    }
    ++s.runs;
  }
}

}  // namespace sluice
