// ssu_uneven.cu — the generic kernels at the uneven dstates (checks.h: uneven_dstate; 96, 160,
// 192 and 224 for every state dtype, and 32, 48, 80, 144, 176, 208, 240 for an fp32 state), the
// dstates other than the compiled-in ones that FlashInfer's sm_90 module takes: single token
// DynUnevenConfig (ssu.cuh: FlashInfer's lane runs of 1 to 7 columns, lanes with fewer columns
// where the row ends; at 6 blocks per SM as DynUnevenWideConfig for calls of >= 48 MiB;
// DynUnevenI16Config for an int16 state; above 256, checks.h: long_dstate, DynLongConfig per
// state dtype, DynLongF32InputsConfig and an int16 state's DynLongI16Config) and
// the horizontal kernel with 2 to 32 stages a row (ssu_hz.cuh: kAnyStages), multi token
// mtp_kernel and mtp_kernel_i16 at each (ssu_mtp.cuh: the next power of two's tile with the
// blocks past dstate skipped; above 256 one long-row mtp_kernel per state kind, kMtpLongRows,
// for every dstate up to 512; an int16 state's in ssu_with_very_long_i16_rows.cu); and the
// single-token generic kernels of an fp32 state with fp32 inputs at every dstate (RowForms over
// DynConfig, DynUnevenConfig and DynUnevenWideConfig: a first form per row kind, ssu.cu:
// f32_input_form; here so that they share this unit's zero pages instead of adding a unit's
// own). Launched for
// plans of ssu.cu, ssu_single_hz.cu and ssu_mtp.cu. A translation unit of its own, sorted
// after the other SSU units, so that their kernels and the device link keep their code and
// shared-memory layout.
#include "checks.h"
#include "common.cuh"
#include "ssu.cuh"
#include "ssu_hz.cuh"
#include "ssu_mtp.cuh"

namespace mamba_ssu {
namespace ssu {

int launch_uneven(const Args &a, unsigned blocks, int warps_per_block, bool wide,
                  cudaStream_t stream) {
  if (wide)
    ssu_kernel<DynUnevenWideConfig><<<blocks, 32 * warps_per_block, 0, stream>>>(a);
  else
    ssu_kernel<DynUnevenConfig><<<blocks, 32 * warps_per_block, 0, stream>>>(a);
  return check_launch("selective_state_update launch");
}

int launch_long(const Args &a, unsigned blocks, int warps_per_block, bool f32_inputs,
                cudaStream_t stream) {
  const unsigned threads = 32 * warps_per_block;
  if (f32_inputs)
    ssu_kernel<DynLongF32InputsConfig><<<blocks, threads, 0, stream>>>(a);
  else if (a.state_dtype == MAMBA_SSU_F32)
    ssu_kernel<DynLongF32Config><<<blocks, threads, 0, stream>>>(a);
  else if (a.state_dtype == MAMBA_SSU_BF16)
    ssu_kernel<DynLongBf16Config><<<blocks, threads, 0, stream>>>(a);
  else
    ssu_kernel<DynLongF16Config><<<blocks, threads, 0, stream>>>(a);
  return check_launch("selective_state_update launch");
}

int launch_uneven_i16(const Args &a, const ScaleArgs &sc, unsigned blocks, int warps_per_block,
                      cudaStream_t stream) {
  if (long_dstate(a.dstate))
    ssu_kernel_scaled<DynLongI16Config><<<blocks, 32 * warps_per_block, 0, stream>>>(a, sc);
  else
    ssu_kernel_scaled<DynUnevenI16Config><<<blocks, 32 * warps_per_block, 0, stream>>>(a, sc);
  return check_launch("selective_state_update launch");
}

int launch_f32_inputs(const Args &a, unsigned blocks, int warps_per_block, bool uneven, bool wide,
                      cudaStream_t stream) {
  const unsigned threads = 32 * warps_per_block;
  if (!uneven)
    ssu_kernel<RowForms<DynConfig>><<<blocks, threads, 0, stream>>>(a);
  else if (wide)
    ssu_kernel<RowForms<DynUnevenWideConfig>><<<blocks, threads, 0, stream>>>(a);
  else
    ssu_kernel<RowForms<DynUnevenConfig>><<<blocks, threads, 0, stream>>>(a);
  return check_launch("selective_state_update launch");
}

}  // namespace ssu

namespace hz {

int launch_uneven(const Args &a, int32_t state_dtype, bool compiled, unsigned nblocks,
                  size_t smem, cudaStream_t st) {
  return with_kernel_params(state_dtype, compiled, a.philox_rounds,
                            [&](auto state, auto rounds, auto bf16) {
                              hz_kernel_any_stages<decltype(state)::value, decltype(rounds)::value,
                                                   decltype(bf16)::value>
                                  <<<nblocks, kThreadsPerBlock, smem, st>>>(a);
                              return check_launch("selective_state_update (horizontal) launch");
                            });
}

}  // namespace hz

namespace mtp {

namespace {
// The run-time kernel at kDstate: an fp32 state's when `f32`, else a 2-byte one's.
template <int kDstate, bool kTwoByte = true>
void launch_dstate(const Args &a, bool f32, unsigned nblocks, size_t smem, cudaStream_t st) {
  if constexpr (kTwoByte) {
    if (!f32) {
      mtp_kernel<false, kDstate, -1, 1, false, false><<<nblocks, kThreads, smem, st>>>(a);
      return;
    }
  }
  mtp_kernel<false, kDstate, -1, 1, false, true><<<nblocks, kThreads, smem, st>>>(a);
}

// The long-row kernel (every dstate above 256, a.dstate at run time) of a 2-byte state, or an
// fp32 state's when `f32`, with its shared-memory opt-in where the block needs one.
int launch_long(const Args &a, bool f32, unsigned nblocks, size_t smem, cudaStream_t st) {
  if (f32) {
    if (int s = allow_long_smem(mtp_kernel<false, kMtpLongRows, -1, 1, false, true>, smem))
      return s;
  } else if (int s = allow_long_smem(mtp_kernel<false, kMtpLongRows, -1, 1, false, false>, smem)) {
    return s;
  }
  launch_dstate<kMtpLongRows>(a, f32, nblocks, smem, st);
  return check_launch("multi-token selective-state-update kernel launch");
}
}  // namespace

int launch_uneven(const Args &a, int dstate, bool f32, unsigned nblocks, size_t smem,
                  cudaStream_t st) {
  if (long_dstate(dstate)) return launch_long(a, f32, nblocks, smem, st);
  // 2-byte states at 96, 160, 192, 224; the others (an fp32 state only) take kTwoByte false,
  // so that no 2-byte kernel is built for them.
  switch (dstate) {
  case 96: launch_dstate<96>(a, f32, nblocks, smem, st); break;
  case 160: launch_dstate<160>(a, f32, nblocks, smem, st); break;
  case 192: launch_dstate<192>(a, f32, nblocks, smem, st); break;
  case 224: launch_dstate<224>(a, f32, nblocks, smem, st); break;
  case 32: launch_dstate<32, false>(a, f32, nblocks, smem, st); break;
  case 48: launch_dstate<48, false>(a, f32, nblocks, smem, st); break;
  case 80: launch_dstate<80, false>(a, f32, nblocks, smem, st); break;
  case 144: launch_dstate<144, false>(a, f32, nblocks, smem, st); break;
  case 176: launch_dstate<176, false>(a, f32, nblocks, smem, st); break;
  case 208: launch_dstate<208, false>(a, f32, nblocks, smem, st); break;
  case 240: launch_dstate<240, false>(a, f32, nblocks, smem, st); break;
  default:
    // check_dstate's uneven set is the cases above: a dstate added there needs its kernel here.
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "dstate: no multi-token kernel for %d", dstate);
  }
  return check_launch("multi-token selective-state-update kernel launch");
}

int launch_uneven_i16(const Args &a, const ScaleArgs &sc, int dstate, unsigned nblocks,
                      size_t smem, cudaStream_t st) {
  if (long_dstate(dstate)) return launch_long_i16(a, sc, false, nblocks, smem, st);
  switch (dstate) {
  case 96: mtp_kernel_i16<96><<<nblocks, kThreads, smem, st>>>(a, sc); break;
  case 160: mtp_kernel_i16<160><<<nblocks, kThreads, smem, st>>>(a, sc); break;
  case 192: mtp_kernel_i16<192><<<nblocks, kThreads, smem, st>>>(a, sc); break;
  case 224: mtp_kernel_i16<224><<<nblocks, kThreads, smem, st>>>(a, sc); break;
  default:
    // The uneven dstates of a 2-byte state (check_dstate): a dstate added there needs its kernel.
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "dstate: no int16 multi-token kernel for %d", dstate);
  }
  return check_launch("multi-token selective-state-update kernel launch");
}

}  // namespace mtp
}  // namespace mamba_ssu
