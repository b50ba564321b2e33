// status.cu — status strings, the per-thread error detail of the C ABI and the argument it names.
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "checks.h"
#include "common.cuh"

namespace mamba_ssu {
namespace {
thread_local char g_detail[512] = "";
thread_local const char *g_argument = "";

// Every argument name a detail of the C ABI begins with (the text before its first ':'): the
// deprecated parameter blocks' fields, the prefetcher's and the seed draws' arguments. A
// detail that begins with one of them names it; the contract check (contract.cu) names its
// arguments explicitly (reject).
constexpr const char *kArgumentNames[] = {
    "params", "batch", "ntokens", "total_tokens", "nheads", "dim", "dstate", "ngroups",
    "state_cache_size", "cache_steps", "intermediate_cache_size", "state_dtype", "input_dtype",
    "weight_dtype", "index_dtype", "algorithm", "seed_source", "philox_rounds", "sr_rule",
    "num_sms", "props", "state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "out",
    "intermediate_states", "state_batch_indices", "dst_state_batch_indices",
    "num_accepted_tokens", "cu_seqlens", "intermediate_state_indices", "state_stride_batch",
    "x_stride_batch", "x_stride_token", "dt_stride_batch", "dt_stride_token", "B_stride_batch",
    "B_stride_token", "C_stride_batch", "C_stride_token", "z_stride_batch", "z_stride_token",
    "out_stride_batch", "out_stride_token", "state_batch_indices_stride",
    "state_batch_indices_stride_col", "state_batch_indices_cols",
    "dst_state_batch_indices_stride", "dst_state_batch_indices_stride_col",
    "num_accepted_tokens_stride", "cu_seqlens_stride", "intermediate_state_indices_stride",
    "num_accepted_tokens_dtype", "cu_seqlens_dtype",
    "rand_seed", "generator_state", "generator_seed_ptr", "generator_offset_ptr",
    "generator_seed_ptr/generator_offset_ptr", "seed_offset", "seed_next", "seed.mode",
    "seed.pointer", "seed.position", "seed.next", "seed.reserved", "n", "offset",
    "intragraph_offset", "seed_ptr", "offset_ptr", "prefetcher", "generator", "position",
    "links", "seed", "stream", "layer", "seed_out", "seeds_per_forward", "prefetch_point",
    "state_scale", "intermediate_state_scales",
    "layout", "graph_increment", "increment", "buf", "rounds",
};

// The name of kArgumentNames that `detail` begins with (followed by ':'), or "".
const char *argument_of(const char *detail) {
  const char *colon = std::strchr(detail, ':');
  if (colon == nullptr) return "";
  const size_t n = static_cast<size_t>(colon - detail);
  for (const char *name : kArgumentNames) {
    if (std::strlen(name) == n && std::strncmp(name, detail, n) == 0) return name;
  }
  return "";
}
}  // namespace

int fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(g_detail, sizeof(g_detail), fmt, ap);
  va_end(ap);
  g_argument = argument_of(g_detail);
  return status;
}

int reject(int status, const char *argument, const char *fmt, ...) {
  const int head = std::snprintf(g_detail, sizeof(g_detail), "%s: ", argument);
  if (head > 0 && static_cast<size_t>(head) < sizeof(g_detail)) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(g_detail + head, sizeof(g_detail) - static_cast<size_t>(head), fmt, ap);
    va_end(ap);
  }
  g_argument = argument;
  return status;
}

const char *last_argument() { return g_argument; }

void rename_argument(const char *argument) {
  if (std::strcmp(argument, g_argument) == 0) return;
  const size_t head = std::strlen(argument) + 2;  // "argument: "
  if (head >= sizeof(g_detail)) return;
  size_t len = std::strlen(g_detail);
  if (head + len >= sizeof(g_detail)) len = sizeof(g_detail) - 1 - head;  // truncated
  std::memmove(g_detail + head, g_detail, len);
  g_detail[head + len] = '\0';
  std::memcpy(g_detail, argument, head - 2);
  g_detail[head - 2] = ':';
  g_detail[head - 1] = ' ';
  g_argument = argument;
}

void clear_error() {
  g_detail[0] = '\0';
  g_argument = "";
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
    case MAMBA_SSU_ERROR_INVALID_VALUE:
      return "invalid option value";
    default:
      return "unknown mamba_ssu status";
  }
}

extern "C" const char *mamba_ssu_last_error_detail(void) { return mamba_ssu::g_detail; }

extern "C" const char *mamba_ssu_last_error_argument(void) { return mamba_ssu::g_argument; }
