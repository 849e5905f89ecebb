#include "python_peer.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace sluice::bench {

nlohmann::json run_python_peer(const std::string& what, const std::string& command, std::string& note) {
  char path[] = "/tmp/sluice-peer-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    note = what + " not run: cannot make a temporary file";
    return nullptr;
  }
  close(fd);
  const std::string full = fmt::format("{} --out {}", command, path);
  const int status = std::system(full.c_str());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path);
  if (status != 0) {
    note = fmt::format("{} not run: `{}` exited with status {}", what, full, status);
    return nullptr;
  }
  try {
    auto j = nlohmann::json::parse(text.str());
    if (j.contains("skipped")) {
      note = fmt::format("{} skipped: {}", what, j.at("skipped").get<std::string>());
      return nullptr;
    }
    return j;
  } catch (const nlohmann::json::exception& e) {
    note = fmt::format("{}'s output could not be read: {}", what, e.what());
    return nullptr;
  }
}

}  // namespace sluice::bench
