// ssu_mtp_check.cu — the multi-token contract check (placeholder until the full check lands).
#include "common.cuh"
#include "ssu_mtp_check.h"

namespace mamba_ssu {
int mtp_check(const mamba_ssu_mtp_params *p) {
  if (p == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "params: null pointer");
  return MAMBA_SSU_SUCCESS;
}
}  // namespace mamba_ssu

extern "C" int mamba_ssu_selective_state_update_mtp_check(const mamba_ssu_mtp_params *params) {
  mamba_ssu::clear_error();
  return mamba_ssu::mtp_check(params);
}
