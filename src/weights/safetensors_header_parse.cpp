#include "weights/safetensors_header_parse.hpp"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace sluice::weights::header_json {

namespace {

using Json = nlohmann::json;

// The bytes of the UTF-8 character at text[i], or 0 where none starts there
// (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF).
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0u; };
  const unsigned c = byte(0);
  const auto continues = [&](std::size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) { return byte(k) >= lo && byte(k) <= hi; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return continues(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const bool second = c == 0xE0 ? continues(1, 0xA0) : c == 0xED ? continues(1, 0x80, 0x9F) : continues(1);
    return second && continues(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const bool second = c == 0xF0 ? continues(1, 0x90) : c == 0xF4 ? continues(1, 0x80, 0x8F) : continues(1);
    return second && continues(2) && continues(3) ? 4 : 0;
  }
  return 0;
}

// What a JSON value is, for the messages ("a JSON array"), as nlohmann names its types.
enum class Kind { null, boolean, negative, unsigned_integer, floating, string, object, array };

std::string_view type_name(Kind kind) {
  switch (kind) {
    case Kind::null: return "null";
    case Kind::boolean: return "boolean";
    case Kind::string: return "string";
    case Kind::object: return "object";
    case Kind::array: return "array";
    default: return "number";
  }
}

// One value as the parser met it: what it is, the value where the format wants one, and its text
// for a quote (a container's opening bracket; a float's text as written).
struct Value {
  Kind kind;
  std::uint64_t number = 0;            // an unsigned integer's value
  std::string_view text = {};          // a string, a float's text as written
  std::int64_t negative = 0;
  bool truth = false;

  bool container() const { return kind == Kind::object || kind == Kind::array; }
  std::string quote() const {
    switch (kind) {
      case Kind::null: return "null";
      case Kind::boolean: return truth ? "true" : "false";
      case Kind::negative: return std::to_string(negative);
      case Kind::unsigned_integer: return std::to_string(number);
      case Kind::floating: return printable(text);
      case Kind::string: return "\"" + printable(text) + "\"";
      case Kind::object: return "{";
      default: return "[";
    }
  }
};

// The text of a shape or data_offsets as far as it was read, cut at quoted_chars.
class Quote {
 public:
  void start() { text_ = "["; cut_ = false; }
  void add(const std::string& element) {
    if (cut_) return;
    const std::string piece = (text_.size() > 1 ? "," : "") + element;
    const std::size_t room = quoted_chars + 1 - text_.size();
    if (piece.size() <= room) {
      text_ += piece;
      return;
    }
    // What fits, cut between characters: the piece is printable UTF-8, and so must stay.
    std::size_t keep = room;
    while (keep > 0 && (static_cast<unsigned char>(piece[keep]) & 0xC0) == 0x80) --keep;
    text_ += piece.substr(0, keep);
    cut_ = true;
  }
  // The array closed where it was read to, or read no further than this.
  std::string text(bool closed) const {
    if (cut_) return text_ + (closed ? "...]" : "...");
    if (closed) return text_ + "]";
    const char last = text_.back();
    return text_ + (last == '[' || last == '{' ? "..." : ", ...]");
  }

 private:
  std::string text_;
  bool cut_ = false;
};

// The parser's events, checked against the format's schema as they come: an
// object of tensor name -> {"dtype": string, "shape": [unsigned], "data_offsets":
// [begin, end]} and an optional "__metadata__" object of string -> string (or
// null). The first violation throws; nothing of a value the format does not
// need is kept but its keys, for the duplicates check, to a depth of
// max_header_depth. nlohmann's parser keeps one bit a level open, and no stack.
class HeaderHandler final : public nlohmann::json_sax<Json> {
 public:
  explicit HeaderHandler(const std::string& path) : path_(path) {}
  Parsed take() { return std::move(out_); }

  bool null() override { return value({Kind::null}); }
  bool boolean(bool v) override { return value({Kind::boolean, 0, {}, 0, v}); }
  bool number_integer(number_integer_t v) override {
    // nlohmann gives the unsigned event for every integer written without a '-'.
    return value({Kind::negative, 0, {}, v});
  }
  bool number_unsigned(number_unsigned_t v) override { return value({Kind::unsigned_integer, v}); }
  bool number_float(number_float_t, const string_t& text) override { return value({Kind::floating, 0, text}); }
  bool string(string_t& v) override { return value({Kind::string, 0, v}); }
  bool binary(binary_t&) override { return value({Kind::string}); }  // JSON has none
  bool start_object(std::size_t) override { return value({Kind::object}); }
  bool start_array(std::size_t) override { return value({Kind::array}); }

  bool key(string_t& k) override {
    fire_pending(false);
    Level& level = levels_.back();
    if (!level.keys.insert(k).second)
      throw refusal(path_, levels_.size() == 1 ? "tensor name " + named(k) + " appears twice in the header"
                                               : "key " + named(k) + " appears twice in " + named(level.name));
    key_ = std::move(k);
    return true;
  }

  bool end_object() override {
    fire_pending(false);
    const In in = levels_.back().in;
    levels_.pop_back();
    if (in == In::tensor) finish_tensor();
    return true;
  }

  bool end_array() override {
    fire_pending(levels_.back().in == In::shape || levels_.back().in == In::offsets);
    const In in = levels_.back().in;
    levels_.pop_back();
    if (in == In::offsets) finish_offsets();
    return true;
  }

  bool parse_error(std::size_t, const std::string& last_token, const nlohmann::detail::exception& e) override {
    fire_pending(false);
    // The message quotes the token it stopped at, which may be the whole of a long string: cut it.
    std::string what = e.what();
    if (const auto at = what.find("'" + last_token + "'"); !last_token.empty() && at != std::string::npos)
      what.replace(at + 1, last_token.size(), printable(last_token));
    throw refusal(path_, "the header is not JSON: " + printable(what, 6 * quoted_chars));
  }

 private:
  // What an open array or object is, for the format.
  enum class In { root, metadata, tensor, shape, offsets, unknown };
  struct Level {
    In in;
    bool object;
    std::string name;  // the key whose value it is (an array's, for one in an array), for the duplicates' messages
    std::set<std::string> keys = {};
  };
  struct Tensor {
    TensorEntry entry;
    bool dtype = false, shape = false, offsets = false;
    std::size_t elements = 0;  // of its shape or data_offsets, whichever is open
    std::string unknown_key;   // the key whose value is open, when the format does not know it
  };
  // A shape or data_offsets that broke the format at its latest element: refused at the next
  // event, once it is known whether the array closed there, so that the message quotes it as read.
  struct Pending {
    std::string field, what;
    bool opened = false;  // the element was an array or object: whatever comes next is inside it
  };

  std::string who() const { return "tensor " + named(tensor_.entry.name); }

  void open(In in, bool object, const std::string& name) {
    if (levels_.size() == max_header_depth)
      throw refusal(path_, who() + ": the value of " + named(tensor_.unknown_key) + " nests deeper than the format allows: " +
                               std::to_string(max_header_depth) +
                               " levels of arrays and objects in all (the format's own fields need 3)");
    levels_.push_back({in, object, name});
  }

  void fire_pending(bool closed) {
    if (!pending_) return;
    throw refusal(path_, who() + ": " + pending_->field + " " + quote_.text(closed && !pending_->opened) + " " + pending_->what);
  }

  // Every value, wherever it is: its place in the format says what it may be.
  bool value(const Value& v) {
    fire_pending(false);
    if (levels_.empty()) {
      if (v.kind != Kind::object)
        throw refusal(path_, "the header is a JSON " + std::string(type_name(v.kind)) + ", not an object");
      levels_.push_back({In::root, true, {}});
      return true;
    }
    switch (levels_.back().in) {
      case In::root: return root_value(v);
      case In::metadata:
        if (v.kind != Kind::string)
          throw refusal(path_, "__metadata__ " + named(key_) + " is a JSON " + std::string(type_name(v.kind)) +
                                   ", not a string (the format allows only string values)");
        out_.metadata.emplace(key_, v.text);
        return true;
      case In::tensor: return tensor_value(v);
      case In::shape: return dimension(v);
      case In::offsets: return offset(v);
      case In::unknown:
        if (v.container()) open(In::unknown, v.kind == Kind::object, levels_.back().object ? key_ : levels_.back().name);
        return true;
    }
    return true;
  }

  bool root_value(const Value& v) {
    if (key_ == "__metadata__") {
      if (v.kind == Kind::object) {
        open(In::metadata, true, key_);
      } else if (v.kind != Kind::null) {  // the reference reader takes null as no metadata
        throw refusal(path_, "__metadata__ is a JSON " + std::string(type_name(v.kind)) + ", not an object of strings");
      }
      return true;
    }
    tensor_ = {};
    tensor_.entry.name = key_;
    if (v.kind != Kind::object)
      throw refusal(path_, who() + " is a JSON " + std::string(type_name(v.kind)) +
                               ", not an object of dtype, shape and data_offsets");
    open(In::tensor, true, key_);
    return true;
  }

  bool tensor_value(const Value& v) {
    const auto type = [&] { return std::string(type_name(v.kind)); };
    if (key_ == "dtype") {
      if (v.kind != Kind::string) throw refusal(path_, who() + ": dtype is a JSON " + type() + ", not a string");
      const auto known = dtype_from(v.text);
      if (!known) throw refusal(path_, who() + ": unknown dtype " + named(v.text));
      tensor_.entry.dtype = *known;
      tensor_.dtype = true;
    } else if (key_ == "shape") {
      if (v.kind != Kind::array) throw refusal(path_, who() + ": shape is a JSON " + type() + ", not an array");
      start_array(In::shape);
      tensor_.shape = true;
    } else if (key_ == "data_offsets") {
      if (v.kind != Kind::array)
        throw refusal(path_, who() + ": data_offsets " + v.quote() + (v.container() ? "...}" : "") +
                                 " is not [begin, end] of two unsigned integers");
      start_array(In::offsets);
      tensor_.offsets = true;
    } else if (v.container()) {
      tensor_.unknown_key = key_;
      open(In::unknown, v.kind == Kind::object, key_);
    }
    return true;
  }

  void start_array(In in) {
    open(in, false, key_);
    quote_.start();
    tensor_.elements = 0;
  }

  bool dimension(const Value& v) {
    quote_.add(v.quote());
    std::string what;
    if (++tensor_.elements > max_shape_dims)
      what = "has more than " + std::to_string(max_shape_dims) + " dimensions (numpy's limit)";
    else if (v.kind == Kind::negative)
      what = "has a negative dimension";
    else if (v.kind != Kind::unsigned_integer || v.number > std::numeric_limits<std::int64_t>::max())
      what = "has a dimension that is not an integer of 63 bits";
    if (!what.empty())
      pending_ = {"shape", std::move(what), v.container()};
    else
      tensor_.entry.shape.push_back(static_cast<std::int64_t>(v.number));
    return true;
  }

  bool offset(const Value& v) {
    quote_.add(v.quote());
    if (++tensor_.elements > 2 || v.kind != Kind::unsigned_integer)
      pending_ = {"data_offsets", "is not [begin, end] of two unsigned integers", v.container()};
    else
      (tensor_.elements == 1 ? tensor_.entry.begin : tensor_.entry.end) = v.number;
    return true;
  }

  std::string offsets_text() const {
    return "[" + std::to_string(tensor_.entry.begin) + "," + std::to_string(tensor_.entry.end) + "]";
  }

  void finish_offsets() {
    if (tensor_.elements != 2)
      throw refusal(path_, who() + ": data_offsets " + quote_.text(true) + " is not [begin, end] of two unsigned integers");
    if (tensor_.entry.end < tensor_.entry.begin)
      throw refusal(path_, who() + ": data_offsets " + offsets_text() + " end before they begin");
  }

  // The tensor's own checks, once its object has closed: its fields, and that its offsets hold its shape times its dtype.
  void finish_tensor() {
    const std::pair<bool, const char*> fields[] = {{tensor_.dtype, "dtype"}, {tensor_.shape, "shape"}, {tensor_.offsets, "data_offsets"}};
    for (const auto& [has, name] : fields)
      if (!has) throw refusal(path_, who() + " has no \"" + name + "\"");
    TensorEntry& entry = tensor_.entry;
    const auto shape = [&] { return shape_text(entry.shape) + " of " + std::string(to_string(entry.dtype)); };
    // Elements times bits, refusing what overflows 64 bits, as the reference reader does.
    std::uint64_t bits = dtype_bits(entry.dtype);
    for (const std::int64_t d : entry.shape)
      if (__builtin_mul_overflow(bits, static_cast<std::uint64_t>(d), &bits))
        throw refusal(path_, who() + ": shape " + shape() + " is more bytes than 64 bits count");
    if (bits % 8 != 0)
      throw refusal(path_, who() + ": shape " + shape() + " is " + std::to_string(bits) + " bits, not a whole number of bytes");
    if (entry.bytes() != bits / 8)
      throw refusal(path_, who() + ": data_offsets " + offsets_text() + " hold " + std::to_string(entry.bytes()) +
                               " bytes, but shape " + shape() + " is " + std::to_string(bits / 8) + " bytes");
    out_.tensors.push_back(std::move(entry));
  }

  // A shape as a message shows it, cut where it grows long (it has at most 64 dimensions).
  static std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (text.size() > quoted_chars) return text + "...]";
      text += (i ? ", " : "") + std::to_string(shape[i]);
    }
    return text + "]";
  }

  const std::string& path_;
  std::vector<Level> levels_;
  std::string key_;  // the latest key read
  Tensor tensor_;    // the latest tensor met
  Quote quote_;      // of its open shape or data_offsets
  std::optional<Pending> pending_;
  Parsed out_;
};

}  // namespace

std::invalid_argument refusal(const std::string& path, const std::string& what) {
  return std::invalid_argument((path.empty() ? std::string("safetensors file") : path) + ": " + what);
}

std::string printable(std::string_view text, std::size_t limit) {
  std::string out;
  std::size_t chars = 0;
  for (std::size_t i = 0; i < text.size(); ++chars) {
    if (chars == limit) return out + "...";
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = utf8_length(text, i);
    if (n > 1 || (n == 1 && c >= 0x20 && c != 0x7F)) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
      ++i;
    }
  }
  return out;
}

std::string named(std::string_view name) { return "'" + printable(name) + "'"; }

Parsed parse(std::string_view text, const std::string& path) {
  HeaderHandler handler(path);
  Json::sax_parse(text.begin(), text.end(), &handler);
  return handler.take();
}

}  // namespace sluice::weights::header_json
