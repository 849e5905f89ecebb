#include "probe_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "text_table.hpp"

namespace sluice::tools {

namespace {

std::vector<std::string> distinct_names(const std::vector<Measurement>& rows) {
  std::vector<std::string> names;
  for (const auto& m : rows)
    if (std::find(names.begin(), names.end(), m.name) == names.end()) names.push_back(m.name);
  return names;
}

std::vector<std::size_t> distinct_sizes(const std::vector<Measurement>& rows) {
  std::vector<std::size_t> sizes;
  for (const auto& m : rows)
    if (std::find(sizes.begin(), sizes.end(), m.bytes) == sizes.end()) sizes.push_back(m.bytes);
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

const Measurement* find(const std::vector<Measurement>& rows, const std::string& name, std::size_t bytes) {
  for (const auto& m : rows)
    if (m.name == name && m.bytes == bytes) return &m;
  return nullptr;
}

// Rows: sizes; columns: one per measurement name; cells from `cell`.
template <typename Cell>
std::string pivot(const std::vector<Measurement>& rows, Cell cell) {
  std::vector<std::string> header{"size"};
  const auto names = distinct_names(rows);
  header.insert(header.end(), names.begin(), names.end());
  TextTable table(header);
  for (std::size_t bytes : distinct_sizes(rows)) {
    std::vector<std::string> line{format_bytes(bytes)};
    for (const auto& name : names) {
      const Measurement* m = find(rows, name, bytes);
      line.push_back(m ? cell(*m) : "-");
    }
    table.add_row(line);
  }
  return table.render();
}

nlohmann::json to_json(const Summary& s) {
  return {{"count", s.count}, {"median", s.median}, {"min", s.min}, {"max", s.max},
          {"p10", s.p10},     {"p90", s.p90},       {"p99", s.p99}};
}

nlohmann::json to_json(const Measurement& m) {
  nlohmann::json j{{"name", m.name}, {"bytes", m.bytes}, {"ms", to_json(m.ms)}};
  if (m.bytes > 0) {
    j["moved_bytes"] = m.moved_bytes();
    j["median_gbps"] = m.median_gbps();
  }
  if (m.threads != 1) j["threads"] = m.threads;
  if (m.chunks != 0) j["chunks"] = m.chunks;
  return j;
}

// Rows: sizes; columns: each chunk count's GB/s, and the fastest chunking's
// share of the link's best both ways.
std::string copy_through_table(const ProbeResult& r) {
  std::vector<std::size_t> counts;
  for (const auto& m : r.copy_through)
    if (std::find(counts.begin(), counts.end(), m.chunks) == counts.end()) counts.push_back(m.chunks);
  std::sort(counts.begin(), counts.end());
  std::vector<std::string> header{"size"};
  for (std::size_t n : counts) header.push_back(std::to_string(n) + (n == 1 ? " chunk" : " chunks"));
  header.push_back("best of the link's both ways");
  TextTable table(header);
  for (const CopyThroughBest& best : copy_through_best(r)) {
    std::vector<std::string> line{format_bytes(best.bytes)};
    for (std::size_t n : counts) {
      const auto m = std::find_if(r.copy_through.begin(), r.copy_through.end(),
                                  [&](const Measurement& x) { return x.bytes == best.bytes && x.chunks == n; });
      line.push_back(m == r.copy_through.end() ? "-" : fmt::format("{:.1f}", m->median_gbps()));
    }
    line.push_back(best.link_gbps > 0 ? fmt::format("{:.3f} ({} {})", best.of_link(), best.chunks,
                                                    best.chunks == 1 ? "chunk" : "chunks")
                                      : "-");
    table.add_row(line);
  }
  return table.render();
}

nlohmann::json to_json(const std::vector<Measurement>& rows) {
  auto array = nlohmann::json::array();
  for (const auto& m : rows) array.push_back(to_json(m));
  return array;
}

}  // namespace

std::string probe_text(const ProbeResult& r) {
  const DeviceInfo& d = r.device;
  std::string out = fmt::format("GPU {}: {} (compute {}.{}, {} SMs, {} copy engines, PCI {})\n", d.ordinal, d.name,
                                d.compute_major, d.compute_minor, d.sm_count, d.async_engine_count, d.pci_bus_id);
  for (const auto& note : overlap_notes(d)) out += "  - " + note + "\n";

  if (!r.transfers.empty()) {
    out += "\nCopy bandwidth, GB/s (median; 'both ways' counts the bytes of both directions):\n";
    out += pivot(r.transfers, [](const Measurement& m) { return fmt::format("{:.1f}", m.median_gbps()); });
  }
  if (!r.copy_through.empty()) {
    out += fmt::format(
        "\nChunked copy-through, GB/s of both directions: each chunk in, then out again, on two streams, no\n"
        "kernel; the best chunking's share of the link's best both ways ({:.1f} GB/s, the bound's link term)\n"
        "is a reference for how much of the bound a chunked pipeline of that size can reach:\n",
        link_rates_of(r).both_gbps);
    out += copy_through_table(r);
  }
  if (!r.registration.empty()) {
    out += "\ncudaHostRegister cost, ms (median), paid once per buffer:\n";
    out += pivot(r.registration, [](const Measurement& m) { return fmt::format("{:.3f}", m.ms.median); });
  }
  if (!r.host_copies.empty()) {
    out += "\nHost memcpy (median): pageable to pageable, staging through pinned slots, and staging beside the link's\n"
           "copies with what the link moved meanwhile:\n";
    TextTable table({"copy", "threads", "size", "GB/s", "min..max GB/s"});
    for (const auto& m : r.host_copies) {
      // 'stage both' counts the bytes of both directions: min and max alike.
      const double scale = m.median_gbps() / gb_per_s(static_cast<double>(m.bytes), m.ms.median);
      table.add_row({m.name, std::to_string(m.threads), format_bytes(m.bytes), fmt::format("{:.1f}", m.median_gbps()),
                     fmt::format("{:.1f}..{:.1f}", scale * gb_per_s(static_cast<double>(m.bytes), m.ms.max),
                                 scale * gb_per_s(static_cast<double>(m.bytes), m.ms.min))});
    }
    out += table.render();
  }
  if (!r.fixed_costs.empty()) {
    out += "\nFixed costs per operation, us:\n";
    TextTable table({"operation", "median", "p10", "p90"});
    for (const auto& m : r.fixed_costs)
      table.add_row({m.name, fmt::format("{:.2f}", m.ms.median * 1e3), fmt::format("{:.2f}", m.ms.p10 * 1e3),
                     fmt::format("{:.2f}", m.ms.p90 * 1e3)});
    out += table.render();
  }
  for (const auto& note : r.notes) out += "note: " + note + "\n";
  return out;
}

std::string probe_json(const ProbeResult& r, int indent) {
  const DeviceInfo& d = r.device;
  nlohmann::json device{{"ordinal", d.ordinal},
                        {"name", d.name},
                        {"compute_capability", fmt::format("{}.{}", d.compute_major, d.compute_minor)},
                        {"sm_count", d.sm_count},
                        {"async_engine_count", d.async_engine_count},
                        {"concurrent_kernels", d.concurrent_kernels},
                        {"unified_addressing", d.unified_addressing},
                        {"stream_priority_least", d.least_stream_priority},
                        {"stream_priority_greatest", d.greatest_stream_priority},
                        {"total_memory_bytes", d.total_memory_bytes},
                        {"free_memory_bytes", d.free_memory_bytes},
                        {"l2_cache_bytes", d.l2_cache_bytes},
                        {"pci_bus_id", d.pci_bus_id},
                        {"overlap_notes", overlap_notes(d)}};
  if (d.pcie_link)
    device["pcie_link"] = {{"current_speed", d.pcie_link->current_speed},
                           {"current_width", d.pcie_link->current_width},
                           {"max_speed", d.pcie_link->max_speed},
                           {"max_width", d.pcie_link->max_width}};
  else
    device["pcie_link"] = nullptr;
  nlohmann::json j{{"device", device},
                   {"transfers", to_json(r.transfers)},
                   {"registration", to_json(r.registration)},
                   {"copy_through", to_json(r.copy_through)},
                   {"host_copies", to_json(r.host_copies)},
                   {"fixed_costs", to_json(r.fixed_costs)},
                   {"notes", r.notes}};
  return j.dump(indent);
}

namespace {

const nlohmann::json& field(const nlohmann::json& j, const char* key, const char* where) {
  if (!j.is_object() || !j.contains(key))
    throw std::invalid_argument(std::string("probe JSON: ") + where + " has no '" + key + "'");
  return j.at(key);
}

Summary summary_from(const nlohmann::json& j) {
  Summary s;
  s.count = field(j, "count", "a summary").get<std::size_t>();
  s.median = field(j, "median", "a summary").get<double>();
  s.min = field(j, "min", "a summary").get<double>();
  s.max = field(j, "max", "a summary").get<double>();
  s.p10 = j.value("p10", s.min);
  s.p90 = j.value("p90", s.max);
  s.p99 = j.value("p99", s.max);
  return s;
}

std::vector<Measurement> measurements_from(const nlohmann::json& j, const char* list) {
  std::vector<Measurement> out;
  for (const auto& item : field(j, list, "the probe")) {
    Measurement m;
    m.name = field(item, "name", list).get<std::string>();
    m.bytes = field(item, "bytes", list).get<std::size_t>();
    m.ms = summary_from(field(item, "ms", list));
    m.threads = item.value("threads", 1u);
    m.chunks = item.value("chunks", std::size_t{0});
    const std::size_t moved = item.value("moved_bytes", m.bytes);
    m.moved = moved == m.bytes ? 0 : moved;
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

ProbeResult probe_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("probe JSON does not parse: ") + e.what());
  }
  try {
    ProbeResult r;
    const auto& d = field(j, "device", "the probe");
    r.device.ordinal = d.value("ordinal", 0);
    r.device.name = field(d, "name", "device").get<std::string>();
    r.device.async_engine_count = d.value("async_engine_count", 0);
    r.device.sm_count = d.value("sm_count", 0);
    r.transfers = measurements_from(j, "transfers");
    r.registration = measurements_from(j, "registration");
    if (j.contains("copy_through")) r.copy_through = measurements_from(j, "copy_through");  // older probes lack it
    r.host_copies = measurements_from(j, "host_copies");
    r.fixed_costs = measurements_from(j, "fixed_costs");
    for (const auto& note : j.value("notes", nlohmann::json::array())) r.notes.push_back(note.get<std::string>());
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("probe JSON has a field of the wrong type: ") + e.what());
  }
}

LinkRates link_rates_of(const ProbeResult& r) {
  LinkRates rates;
  for (const auto& m : r.transfers) {
    if (m.name == "h2d pinned") rates.h2d_gbps = std::max(rates.h2d_gbps, m.median_gbps());
    if (m.name == "d2h pinned") rates.d2h_gbps = std::max(rates.d2h_gbps, m.median_gbps());
    if (m.name == "both ways pinned") rates.both_gbps = std::max(rates.both_gbps, m.median_gbps());
    // 2:1 moves two thirds of its bytes one way and a third the other.
    const double gbps = m.median_gbps();
    if (m.name == "both ways 2:1 pinned" && gbps > rates.h2d_heavy.h2d_gbps + rates.h2d_heavy.d2h_gbps)
      rates.h2d_heavy = {gbps * 2 / 3, gbps / 3};
    if (m.name == "both ways 1:2 pinned" && gbps > rates.d2h_heavy.h2d_gbps + rates.d2h_heavy.d2h_gbps)
      rates.d2h_heavy = {gbps / 3, gbps * 2 / 3};
  }
  return rates;
}

EngineRates engine_rates_of(const ProbeResult& r) {
  EngineRates rates = with_link({}, link_rates_of(r));
  for (const auto& m : r.host_copies) {
    if (m.name == "stage in") rates.stage_in_gbps = m.median_gbps();
    if (m.name == "stage out") rates.stage_out_gbps = m.median_gbps();
    if (m.name == "stage both") rates.stage_both_gbps = m.median_gbps();
    if (m.name == "stage both beside the link") rates.staging_beside_link.stage_gbps = m.median_gbps();
    if (m.name == "link beside staging") rates.staging_beside_link.link_gbps = m.median_gbps();
  }
  return rates;
}

FixedCosts fixed_costs_of(const ProbeResult& r) {
  FixedCosts costs;
  for (const auto& m : r.fixed_costs) {
    if (m.name == "model: copy latency") costs.copy_ms = m.ms.median;
    if (m.name == "model: kernel start after its event") costs.launch_ms = m.ms.median;
    if (m.name == "model: blocked thread wake-up") costs.wake_ms = m.ms.median;
    if (m.name == "model: host work per chunk") costs.chunk_ms = m.ms.median;
    if (m.name == "model: staging job hand-off") costs.stage_ms = m.ms.median;
    if (m.name == "model: a run's own start and end") costs.run_ms = m.ms.median;
  }
  return costs;
}

std::vector<CopyThroughBest> copy_through_best(const ProbeResult& r) {
  const double link = link_rates_of(r).both_gbps;
  std::vector<CopyThroughBest> out;
  for (const auto& m : r.copy_through) {
    auto at = std::find_if(out.begin(), out.end(), [&](const CopyThroughBest& b) { return b.bytes == m.bytes; });
    if (at == out.end()) {
      out.push_back({m.bytes, m.chunks, m.median_gbps(), link});
    } else if (m.median_gbps() > at->gbps) {
      at->chunks = m.chunks;
      at->gbps = m.median_gbps();
    }
  }
  std::sort(out.begin(), out.end(), [](const CopyThroughBest& a, const CopyThroughBest& b) { return a.bytes < b.bytes; });
  return out;
}

}  // namespace sluice::tools
