#pragma once
// The PyTorch peers are Python scripts (torch_peer.py, torch_loader_peer.py):
// each is run as `<command> --out FILE` in the same process tree as the bench,
// writes JSON to FILE, and answers {"skipped": reason} where it cannot run.
#include <nlohmann/json.hpp>
#include <string>

namespace sluice::bench {

// The peer's JSON, or null with `note` saying why (`what` names the peer):
// it could not start, exited non-zero, skipped itself, or wrote unreadable JSON.
nlohmann::json run_python_peer(const std::string& what, const std::string& command, std::string& note);

}  // namespace sluice::bench
