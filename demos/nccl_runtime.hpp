#pragma once
// NCCL, loaded when a demo first asks for it rather than linked: the build
// needs only its header, and a machine without the library still runs every
// other demo (the NCCL ones say why they cannot). The library is looked for
// at $SLUICE_NCCL_LIBRARY, then as libnccl.so.2 on the loader's path (pip's
// nvidia-nccl package keeps it in site-packages/nvidia/nccl/lib).
#include <string>
#include <vector>

#if __has_include(<nccl.h>)
#include <nccl.h>
#define SLUICE_HAVE_NCCL_HEADER 1
#endif

namespace sluice::demo {

#ifdef SLUICE_HAVE_NCCL_HEADER
struct NcclApi {
  ncclResult_t (*get_version)(int*);
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*group_start)();
  ncclResult_t (*group_end)();
  const char* (*error_string)(ncclResult_t);
  int version = 0;
};

// The loaded library, or nullptr with `why` saying what is missing. Sets
// NCCL_NVLS_ENABLE=0 first: these demos never use NVLink multicast, and on a
// shared host it must stay off.
const NcclApi* load_nccl(std::string& why);

// Throws std::runtime_error naming the call and NCCL's message.
void nccl_check(const NcclApi& nccl, ncclResult_t result, const char* what);

// One communicator per GPU in `devices`, made in this process
// (ncclCommInitAll); destroyed with the object.
class NcclComms {
 public:
  NcclComms(const NcclApi& nccl, const std::vector<int>& devices);
  ~NcclComms();
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;
  ncclComm_t operator[](std::size_t rank) const { return comms_[rank]; }

 private:
  const NcclApi& nccl_;
  std::vector<ncclComm_t> comms_;
};
#endif

// Why NCCL demos cannot run here, or empty when they can: no header at
// build time, no library, or fewer than two GPUs.
std::string nccl_unavailable_reason();

}  // namespace sluice::demo
