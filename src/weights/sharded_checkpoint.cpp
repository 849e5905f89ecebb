#include "weights/sharded_checkpoint.hpp"

#include <map>
#include <stdexcept>
#include <utility>

#include "weights/safetensors_header_parse.hpp"

namespace sluice::weights {

std::vector<ShardedFile> ShardedCheckpoint::data() const {
  std::vector<ShardedFile> out;
  for (std::size_t k = 0; k < headers.size(); ++k)
    out.push_back({paths[k].string(), headers[k].data_begin, headers[k].file_bytes - headers[k].data_begin});
  return out;
}

ShardedCheckpoint read_sharded_checkpoint(const std::filesystem::path& index_path) {
  ShardedCheckpoint out;
  out.index = read_safetensors_index(index_path);
  const std::filesystem::path dir = index_path.parent_path();
  // Each file's tensors, by name, to hold the index to them.
  std::vector<std::map<std::string, bool>> named_in(out.index.files.size());
  for (const std::string& file : out.index.files) {
    out.paths.push_back(dir / file);
    out.headers.push_back(read_safetensors_header(out.paths.back().string()));
    auto& names = named_in[out.headers.size() - 1];
    for (const TensorEntry& t : out.headers.back().tensors) names.emplace(t.name, false);
  }
  const std::string index_name = index_path.string();
  for (const SafetensorsIndex::Entry& e : out.index.tensors) {
    auto& names = named_in[e.file];
    const auto at = names.find(e.tensor);
    if (at == names.end())
      throw std::invalid_argument(index_name + ": tensor " + header_json::named(e.tensor) + " is in " +
                                  out.paths[e.file].string() + ", says the index, but that file's header has no such tensor");
    at->second = true;
  }
  for (std::size_t k = 0; k < named_in.size(); ++k)
    for (const auto& [name, indexed] : named_in[k])
      if (!indexed)
        throw std::invalid_argument(index_name + ": " + out.paths[k].string() + " holds tensor " + header_json::named(name) +
                                    ", which the index does not name there");
  return out;
}

}  // namespace sluice::weights
