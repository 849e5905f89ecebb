#pragma once
// A product's options as Python sees them, stated once: each option's name,
// the values it takes, and a line of what it does, over the product's C++
// options struct, whose default-constructed value is where every default is
// written. The binding fills the struct from keyword arguments with it, and
// the Python classes build their signatures and docstrings from it
// (_sluice.<product>_options(): [(name, default, values or None, doc)]).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice::python {

template <typename E>
using Names = std::vector<std::pair<const char*, E>>;

template <typename Options>
struct Option {
  const char* name;
  const char* doc;
  std::vector<std::string> values;  // empty: any value of the field's type
  const char* takes;                // for a refusal: "a number"
  std::function<pybind11::object(const Options&)> get;
  std::function<void(Options&, pybind11::handle)> set;
};

// What a value of T is, for a refusal.
template <typename T>
constexpr const char* takes() {
  if constexpr (std::is_same_v<T, bool>) return "True or False";
  else if constexpr (std::is_same_v<T, std::optional<int>>) return "a device number or None";
  else if constexpr (std::is_arithmetic_v<T>) return "a number";
  else if constexpr (std::is_same_v<T, std::optional<std::size_t>>) return "a number or None";
  else return "a value of its type";
}

template <typename Options, typename T>
Option<Options> plain(const char* name, T Options::*field, const char* doc) {
  return {name, doc, {}, takes<T>(), [field](const Options& o) { return pybind11::cast(o.*field); },
          [field](Options& o, pybind11::handle v) { o.*field = v.cast<T>(); }};
}

template <typename Options, typename E>
Option<Options> named(const char* name, E Options::*field, const Names<E>& names, const char* doc) {
  std::vector<std::string> values;
  for (const auto& n : names) values.emplace_back(n.first);
  return {name, doc, values, "one of its values",
          [field, &names](const Options& o) -> pybind11::object {
            for (const auto& n : names)
              if (n.second == o.*field) return pybind11::str(n.first);
            return pybind11::none();
          },
          [name, field, &names, values](Options& o, pybind11::handle v) {
            const auto text = pybind11::isinstance<pybind11::str>(v) ? v.cast<std::string>() : std::string(pybind11::repr(v));
            for (const auto& n : names)
              if (text == n.first) {
                o.*field = n.second;
                return;
              }
            std::string known;
            for (const auto& k : values) known += (known.empty() ? "'" : ", '") + k + "'";
            throw pybind11::value_error(std::string(name) + " must be one of " + known + ", not " +
                                        std::string(pybind11::repr(v)));
          }};
}

template <typename Options>
class OptionTable {
 public:
  // `product` names it in messages ("unknown pipeline option").
  OptionTable(const char* product, std::vector<Option<Options>> options)
      : product_(product), options_(std::move(options)) {}

  // The struct from keyword arguments; an unknown name or value is a
  // TypeError or ValueError that lists what is known. Names in `left_out`
  // are not options here (a MultiPipeline takes its devices, not `device`).
  Options fill(const pybind11::kwargs& given, const std::vector<std::string>& left_out = {}) const {
    Options o;
    for (const auto& [key, value] : given) {
      const auto name = key.template cast<std::string>();
      const Option<Options>* found = nullptr;
      for (const auto& option : options_)
        if (name == option.name && !left(option.name, left_out)) found = &option;
      if (!found) {
        std::string known;
        for (const auto& option : options_)
          if (!left(option.name, left_out)) known += (known.empty() ? "" : ", ") + std::string(option.name);
        throw pybind11::type_error("unknown " + product_ + " option '" + name + "': the options are " + known);
      }
      try {
        found->set(o, value);
      } catch (const pybind11::cast_error&) {
        throw pybind11::type_error(name + " takes " + found->takes + ", not " + std::string(pybind11::repr(value)));
      }
    }
    return o;
  }

  // [(name, default, values or None, doc)], in order.
  pybind11::list describe() const {
    const Options defaults{};
    pybind11::list out;
    for (const auto& option : options_)
      out.append(pybind11::make_tuple(
          option.name, option.get(defaults),
          option.values.empty() ? pybind11::object(pybind11::none()) : pybind11::object(pybind11::cast(option.values)),
          option.doc));
    return out;
  }

 private:
  static bool left(const char* name, const std::vector<std::string>& left_out) {
    for (const auto& l : left_out)
      if (l == name) return true;
    return false;
  }
  std::string product_;
  std::vector<Option<Options>> options_;
};

}  // namespace sluice::python
