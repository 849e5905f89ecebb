#include "nccl_runtime.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "sluice/core/device.hpp"

namespace sluice::demo {

#ifdef SLUICE_HAVE_NCCL_HEADER
namespace {

void* open_library(std::string& tried) {
  std::vector<std::string> names;
  if (const char* path = std::getenv("SLUICE_NCCL_LIBRARY"); path && *path) names.emplace_back(path);
  names.emplace_back("libnccl.so.2");
  names.emplace_back("libnccl.so");
  for (const auto& name : names) {
    if (void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    tried += (tried.empty() ? "" : "; ") + name + ": " + dlerror();
  }
  return nullptr;
}

template <typename F>
bool resolve(void* handle, const char* symbol, F& out, std::string& why) {
  out = reinterpret_cast<F>(dlsym(handle, symbol));
  if (!out) why = std::string("NCCL library lacks ") + symbol;
  return out != nullptr;
}

struct Loaded {
  NcclApi api{};
  std::string why;
  bool ok = false;
};

Loaded load() {
  Loaded l;
  // Before NCCL reads its environment: multicast stays off whatever the caller set.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  std::string tried;
  void* handle = open_library(tried);
  if (!handle) {
    l.why = "NCCL library not found (" + tried +
            "); set SLUICE_NCCL_LIBRARY to libnccl.so.2 or add its folder to LD_LIBRARY_PATH";
    return l;
  }
  auto& a = l.api;
  l.ok = resolve(handle, "ncclGetVersion", a.get_version, l.why) &&
         resolve(handle, "ncclCommInitAll", a.comm_init_all, l.why) &&
         resolve(handle, "ncclCommDestroy", a.comm_destroy, l.why) &&
         resolve(handle, "ncclAllReduce", a.all_reduce, l.why) &&
         resolve(handle, "ncclGroupStart", a.group_start, l.why) &&
         resolve(handle, "ncclGroupEnd", a.group_end, l.why) &&
         resolve(handle, "ncclGetErrorString", a.error_string, l.why);
  if (l.ok && a.get_version(&a.version) != ncclSuccess) {
    l.ok = false;
    l.why = "ncclGetVersion failed";
  }
  return l;  // the library stays loaded for the life of the process
}

}  // namespace

const NcclApi* load_nccl(std::string& why) {
  static const Loaded loaded = load();
  if (!loaded.ok) {
    why = loaded.why;
    return nullptr;
  }
  return &loaded.api;
}

void nccl_check(const NcclApi& nccl, ncclResult_t result, const char* what) {
  if (result != ncclSuccess) throw std::runtime_error(std::string(what) + " failed: " + nccl.error_string(result));
}

NcclComms::NcclComms(const NcclApi& nccl, const std::vector<int>& devices) : nccl_(nccl), comms_(devices.size()) {
  nccl_check(nccl_, nccl_.comm_init_all(comms_.data(), static_cast<int>(devices.size()), devices.data()),
             "ncclCommInitAll");
}

NcclComms::~NcclComms() {
  for (auto comm : comms_) nccl_.comm_destroy(comm);
}
#endif

std::string nccl_unavailable_reason() {
#ifndef SLUICE_HAVE_NCCL_HEADER
  return "sluice was built without nccl.h (NCCL's header; the CUDA toolkit or the libnccl-dev package has it)";
#else
  if (Device::count() < 2) return "needs two GPUs or more; this machine has " + std::to_string(Device::count());
  std::string why;
  if (!load_nccl(why)) return why;
  return {};
#endif
}

}  // namespace sluice::demo
