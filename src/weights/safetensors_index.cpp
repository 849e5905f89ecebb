#include "weights/safetensors_index.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "sluice/core/io_error.hpp"
#include "weights/safetensors_header_parse.hpp"

namespace sluice::weights {

namespace {

using Json = nlohmann::json;
using header_json::named;
using header_json::printable;

std::invalid_argument refusal(const std::string& path, const std::string& what) {
  return std::invalid_argument((path.empty() ? std::string("safetensors index") : path) + ": " + what);
}

// Levels of arrays and objects an index may nest (it needs 2; metadata may use the rest).
constexpr std::size_t max_index_depth = 8;

// A file name the index may give: one plain name in its own directory.
void check_file_name(const std::string& name, const std::string& tensor, const std::string& path) {
  // Control characters (C0, DEL, and C1 as UTF-8 writes them) and names of nothing but spaces.
  bool control = false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    const auto next = i + 1 < name.size() ? static_cast<unsigned char>(name[i + 1]) : 0u;
    control |= c < 0x20 || c == 0x7F || (c == 0xC2 && next >= 0x80 && next <= 0x9F);
  }
  const bool blank = name.find_first_not_of(' ') == std::string::npos;
  if (blank || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || control)
    throw refusal(path, "tensor " + named(tensor) + " is in file " + named(name) +
                            ", which is not a plain file name in the index's directory");
}

class IndexHandler final : public nlohmann::json_sax<Json> {
 public:
  explicit IndexHandler(const std::string& path) : path_(path) {}
  SafetensorsIndex take() {
    if (!weight_map_) throw refusal(path_, "no \"weight_map\" object");
    return std::move(out_);
  }

  bool null() override { return value("null"); }
  bool boolean(bool) override { return value("a boolean"); }
  bool number_integer(number_integer_t) override { return value("a number"); }
  bool number_unsigned(number_unsigned_t) override { return value("a number"); }
  bool number_float(number_float_t, const string_t&) override { return value("a number"); }
  bool binary(binary_t&) override { return value("a string"); }
  bool string(string_t& v) override {
    if (in_map()) {
      check_file_name(v, key_, path_);
      const auto [at, added] = file_at_.emplace(v, out_.files.size());
      if (added) out_.files.push_back(v);
      out_.tensors.push_back({key_, at->second});
      return true;
    }
    return value("a string");
  }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    if (depth_ == 1 && !seen_top_.insert(k).second) throw refusal(path_, "key " + named(k) + " appears twice");
    if (in_map() && !tensor_names_.insert(k).second)
      throw refusal(path_, "tensor " + named(k) + " appears twice in the weight_map");
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw refusal(path_, "the index is not JSON: " + printable(e.what(), 6 * header_json::quoted_chars));
  }

 private:
  bool in_map() const { return depth_ == 2 && map_open_; }

  // A value the format does not take where it stands: only metadata's may be anything.
  bool value(const char* what) {
    if (depth_ == 0) throw refusal(path_, std::string("the index is ") + what + ", not an object");
    if (in_map()) throw refusal(path_, "tensor " + named(key_) + "'s file is " + what + ", not a string");
    if (depth_ == 1 && key_ == "weight_map") throw refusal(path_, std::string("\"weight_map\" is ") + what + ", not an object");
    return true;
  }

  bool open(bool object) {
    if (depth_ == 0 && !object) throw refusal(path_, "the index is an array, not an object");
    if (in_map()) throw refusal(path_, "tensor " + named(key_) + "'s file is " + (object ? "an object" : "an array") + ", not a string");
    if (depth_ == 1 && key_ == "weight_map") {
      if (!object) throw refusal(path_, "\"weight_map\" is an array, not an object");
      map_open_ = true;
      weight_map_ = true;
    }
    if (++depth_ > max_index_depth)
      throw refusal(path_, "it nests deeper than " + std::to_string(max_index_depth) + " levels of arrays and objects");
    return true;
  }

  bool close() {
    if (depth_ == 2 && map_open_) map_open_ = false;
    --depth_;
    return true;
  }

  std::string path_;
  SafetensorsIndex out_;
  std::map<std::string, std::size_t> file_at_;
  std::set<std::string> tensor_names_, seen_top_;
  std::string key_;
  std::size_t depth_ = 0;
  bool map_open_ = false, weight_map_ = false;
};

}  // namespace

SafetensorsIndex parse_safetensors_index(std::string_view text, const std::string& path) {
  IndexHandler handler(path);
  Json::sax_parse(text, &handler, Json::input_format_t::json, true, false);
  return handler.take();
}

SafetensorsIndex read_safetensors_index(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) throw IoError(name, 0, "is not a file (the index must be one)");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw IoError(name, 0, "cannot open the index");
  const auto size = static_cast<std::uint64_t>(in.tellg());
  if (size > safetensors_max_index_bytes)
    throw IoError(name, 0, "the index is " + std::to_string(size) + " bytes, over the " +
                               std::to_string(safetensors_max_index_bytes) + " any model's needs");
  std::string text(size, '\0');
  in.seekg(0);
  if (!in.read(text.data(), static_cast<std::streamsize>(size))) throw IoError(name, 0, "cannot read the index");
  return parse_safetensors_index(text, name);
}

}  // namespace sluice::weights
