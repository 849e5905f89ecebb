#include "errors.hpp"

#include <array>
#include <utility>

namespace sluice::python {

namespace py = pybind11;

std::string in_python_words(std::string text) {
  // The C++ statement of each phrase, and what a Python caller can do instead.
  static const std::array<std::pair<std::string, std::string>, 5> words = {{
      {"page-lock it (a sluice::HostRegistration the caller holds) or pass pinned memory",
       "pass a pinned tensor (tensor.pin_memory()), or leave host_memory='automatic' so that the pipeline "
       "page-locks the arrays it holds once their first run is over"},
      {"a sluice::HostRegistration the caller holds has it copied directly",
       "a pinned tensor (tensor.pin_memory()) is copied directly"},
      {"(Replay::graph)", "(replay=True)"},
      {"kernel_order = KernelOrder::independent", "kernel_order='independent'"},
      {"(HostMemoryPolicy::register_memory)", "(host_memory='register')"},
  }};
  for (const auto& [cpp, python] : words) {
    std::string out;
    std::size_t from = 0;
    for (auto at = text.find(cpp); at != std::string::npos; at = text.find(cpp, from)) {
      out.append(text, from, at - from).append(python);
      from = at + cpp.size();
    }
    text = out.append(text, from, std::string::npos);
  }
  return text;
}

void rethrow_nested_python_error(const std::exception& e) {
  try {
    std::rethrow_if_nested(e);
  } catch (const py::error_already_set&) {
    throw;
  } catch (const std::exception& inner) {
    rethrow_nested_python_error(inner);
  } catch (...) {
    // Something that is neither: the outer error, naming chunk and stage, says more.
  }
}

}  // namespace sluice::python
