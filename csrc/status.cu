// status.cu — status strings and the per-thread error detail of the C ABI.
#include <cstdarg>
#include <cstdio>

#include "checks.h"
#include "common.cuh"

namespace mamba_ssu {
namespace {
thread_local char g_detail[512] = "";
thread_local const int64_t *g_last_seed_next = nullptr;
}

void note_ssu_launch(const int64_t *seed_next) { g_last_seed_next = seed_next; }
const int64_t *last_ssu_seed_next() { return g_last_seed_next; }

int fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(g_detail, sizeof(g_detail), fmt, ap);
  va_end(ap);
  return status;
}

void clear_error() {
  g_detail[0] = '\0';
  // A non-sticky error left by an earlier runtime call on this thread is not this call's: drop
  // it, so that check_launch reads only what this call's launch reports. (A sticky error, from
  // a faulted context, cannot be cleared and fails this call's launch as well.)
  (void)cudaGetLastError();
}

int check_cuda(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return MAMBA_SSU_SUCCESS;
  return fail(MAMBA_SSU_ERROR_CUDA, "%s: %s (%s)", what, cudaGetErrorString(err),
              cudaGetErrorName(err));
}

int check_launch(const char *what) { return check_cuda(cudaGetLastError(), what); }

int device_num_sms(int32_t given, int *out) {
  if (given > 0) {
    *out = given;
    return MAMBA_SSU_SUCCESS;
  }
  int dev = 0;
  if (int s = check_cuda(cudaGetDevice(&dev), "cudaGetDevice")) return s;
  return check_cuda(cudaDeviceGetAttribute(out, cudaDevAttrMultiProcessorCount, dev),
                    "cudaDeviceGetAttribute(MultiProcessorCount)");
}

}  // namespace mamba_ssu

extern "C" const char *mamba_ssu_status_string(int status) {
  switch (status) {
    case MAMBA_SSU_SUCCESS:
      return "success";
    case MAMBA_SSU_ERROR_INVALID_ARGUMENT:
      return "invalid argument";
    case MAMBA_SSU_ERROR_UNSUPPORTED:
      return "unsupported combination of dtypes or sizes";
    case MAMBA_SSU_ERROR_CUDA:
      return "CUDA error";
    case MAMBA_SSU_ERROR_SCOPE:
      return "prefetcher forward scope misused";
    default:
      return "unknown mamba_ssu status";
  }
}

extern "C" const char *mamba_ssu_last_error_detail(void) { return mamba_ssu::g_detail; }
