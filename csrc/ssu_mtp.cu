// ssu_mtp.cu — host side of the multi-token selective-state-update: planning and dispatch.
// (The kernel lands here; until then the launcher reports MAMBA_SSU_ERROR_UNSUPPORTED.)
#include "common.cuh"
#include "ssu_mtp_check.h"

using namespace mamba_ssu;

extern "C" int mamba_ssu_selective_state_update_mtp(mamba_ssu_stream_t, const mamba_ssu_mtp_params *params) {
  clear_error();
  if (int s = mtp_check(params)) return s;
  return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "multi-token kernel: not built yet");
}

extern "C" int mamba_ssu_selective_state_update_mtp_plan(const mamba_ssu_mtp_params *params, int32_t,
                                                         mamba_ssu_launch_plan *) {
  clear_error();
  if (int s = mtp_check(params)) return s;
  return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "multi-token kernel: not built yet");
}
