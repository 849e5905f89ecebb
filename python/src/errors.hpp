#pragma once
// Errors as Python users should see them: their own exception back from a
// run (the C++ core nests what a callable threw inside an error naming the
// chunk and stage), and refusals worded in Python's terms, not C++'s.
#include <pybind11/pybind11.h>

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace sluice::python {

// The text of a C++ refusal in the words of the Python surface.
std::string in_python_words(std::string text);

// Rethrows the pybind11::error_already_set nested (at any depth) in `e`, if any.
void rethrow_nested_python_error(const std::exception& e);

// Calls f(), handing back as Python users expect what it throws: a Python
// exception a callable raised, itself; an invalid_argument, reworded.
template <typename F>
auto with_python_errors(F&& f) -> decltype(f()) {
  try {
    return std::forward<F>(f)();
  } catch (const pybind11::error_already_set&) {
    throw;
  } catch (const std::invalid_argument& e) {
    rethrow_nested_python_error(e);
    throw pybind11::value_error(in_python_words(e.what()));
  } catch (const std::exception& e) {
    rethrow_nested_python_error(e);
    throw;
  }
}

}  // namespace sluice::python
