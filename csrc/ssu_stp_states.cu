// ssu_stp_states.cu — the single-token SSU's compiled-in kernels for a BF16 or an F32 state (no
// SR): the hot kernels' code (HotConfig, HotDimConfig, HotDsConfig; ssu.cuh) with the state
// widened from bf16 and rounded to nearest bf16 (Bf16State), or held in fp32 in FlashInfer's lane
// columns for 4-byte elements (F32State), launched for plans of ssu.cu (the wrappers and the
// launch: ssu_stp_states.cuh; an I16 state's kernels: ssu_stp_states_i16.cu). A translation unit
// of its own, sorted after the other kernels' units, so that the device link keeps the F16
// kernels' code and layout as they were.
#include "ssu_stp_states.cuh"

namespace mamba_ssu {
namespace ssu {

namespace {

using states::Bf16State;
using states::F32State;
using states::launcher::launch_state;

}  // namespace

int launch_hot_state(const Args &a, StpStateFamily family, unsigned blocks, int wpb,
                     cudaStream_t st, int64_t rows, int small_rows, bool simple) {
  if (a.philox_rounds != 0)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "no compiled-in BF16- or F32-state kernel with SR");
  if (a.state_dtype == MAMBA_SSU_BF16)
    return launch_state<Bf16State>(a, family, blocks, wpb, st, rows, small_rows, simple, nullptr);
  if (a.state_dtype == MAMBA_SSU_F32)
    return launch_state<F32State>(a, family, blocks, wpb, st, rows, small_rows, simple, nullptr);
  return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "no compiled-in kernel for this state dtype here");
}

}  // namespace ssu
}  // namespace mamba_ssu
