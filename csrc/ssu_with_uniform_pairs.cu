// ssu_with_uniform_pairs.cu — the multi-token SSU's run-time kernels with FlashInfer's uniform
// update of a column pair, for calls whose inputs are not bf16 (fp16 or fp32: mtp::uniform_pairs;
// ssu_mtp.cuh: mtp_step_pair): mtp_kernel_uniform (an fp16 or a bf16 state),
// mtp_kernel_f32_uniform (an fp32 state) and mtp_kernel_i16_uniform (an int16 state), at every
// dstate the multi-token check passes for the state (above 256 their long-row kernels,
// kMtpLongRows: one for every dstate up to 512; an int16 state's in
// ssu_with_very_long_i16_rows.cu); launched for plans of ssu_mtp.cu. Each is the
// code of its state's run-time kernel with only the update's contraction changed. A translation
// unit of its own whose name sorts after every other kernel unit's, so that the other units and
// the device link keep their code.
#include "checks.h"
#include "common.cuh"
#include "ssu_mtp.cuh"

namespace mamba_ssu {
namespace mtp {

namespace {

// kDstate kMtpLongRows: the long-row kernels, with their shared-memory opt-in where the block
// needs one.
template <int kDstate>
int launch_2byte(const Args &a, unsigned nblocks, size_t smem, cudaStream_t st) {
  if constexpr (kDstate == kMtpLongRows) {
    if (int s = allow_long_smem(mtp_kernel_uniform<kDstate>, smem)) return s;
  }
  mtp_kernel_uniform<kDstate><<<nblocks, kThreads, smem, st>>>(a);
  return check_launch("multi-token selective-state-update kernel launch");
}

template <int kDstate>
int launch_f32(const Args &a, unsigned nblocks, size_t smem, cudaStream_t st) {
  if constexpr (kDstate == kMtpLongRows) {
    if (int s = allow_long_smem(mtp_kernel_f32_uniform<kDstate>, smem)) return s;
  }
  mtp_kernel_f32_uniform<kDstate><<<nblocks, kThreads, smem, st>>>(a);
  return check_launch("multi-token selective-state-update kernel launch");
}

template <int kDstate>
int launch_i16(const Args &a, const ScaleArgs &sc, unsigned nblocks, size_t smem,
               cudaStream_t st) {
  mtp_kernel_i16_uniform<kDstate><<<nblocks, kThreads, smem, st>>>(a, sc);
  return check_launch("multi-token selective-state-update kernel launch");
}

int no_kernel(int dstate) {
  // check_dstate's set for the state is the cases below: a dstate added there needs its kernel.
  return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "dstate: no multi-token kernel for %d", dstate);
}

}  // namespace

int launch_uniform(const Args &a, const ScaleArgs &sc, int dstate, unsigned nblocks, size_t smem,
                   cudaStream_t st) {
  // Above 256 the long-row kernels, the row's length at run time.
  if (long_dstate(dstate))
    return a.state_dtype == MAMBA_SSU_F32   ? launch_f32<kMtpLongRows>(a, nblocks, smem, st)
           : a.state_dtype == MAMBA_SSU_I16 ? launch_long_i16(a, sc, true, nblocks, smem, st)
                                            : launch_2byte<kMtpLongRows>(a, nblocks, smem, st);
  if (a.state_dtype == MAMBA_SSU_F32) {
    switch (dstate) {
    case 32: return launch_f32<32>(a, nblocks, smem, st);
    case 48: return launch_f32<48>(a, nblocks, smem, st);
    case 64: return launch_f32<64>(a, nblocks, smem, st);
    case 80: return launch_f32<80>(a, nblocks, smem, st);
    case 96: return launch_f32<96>(a, nblocks, smem, st);
    case 128: return launch_f32<128>(a, nblocks, smem, st);
    case 144: return launch_f32<144>(a, nblocks, smem, st);
    case 160: return launch_f32<160>(a, nblocks, smem, st);
    case 176: return launch_f32<176>(a, nblocks, smem, st);
    case 192: return launch_f32<192>(a, nblocks, smem, st);
    case 208: return launch_f32<208>(a, nblocks, smem, st);
    case 224: return launch_f32<224>(a, nblocks, smem, st);
    case 240: return launch_f32<240>(a, nblocks, smem, st);
    case 256: return launch_f32<256>(a, nblocks, smem, st);
    default: return no_kernel(dstate);
    }
  }
  if (a.state_dtype == MAMBA_SSU_I16) {
    switch (dstate) {
    case 64: return launch_i16<64>(a, sc, nblocks, smem, st);
    case 96: return launch_i16<96>(a, sc, nblocks, smem, st);
    case 128: return launch_i16<128>(a, sc, nblocks, smem, st);
    case 160: return launch_i16<160>(a, sc, nblocks, smem, st);
    case 192: return launch_i16<192>(a, sc, nblocks, smem, st);
    case 224: return launch_i16<224>(a, sc, nblocks, smem, st);
    case 256: return launch_i16<256>(a, sc, nblocks, smem, st);
    default: return no_kernel(dstate);
    }
  }
  switch (dstate) {
  case 64: return launch_2byte<64>(a, nblocks, smem, st);
  case 96: return launch_2byte<96>(a, nblocks, smem, st);
  case 128: return launch_2byte<128>(a, nblocks, smem, st);
  case 160: return launch_2byte<160>(a, nblocks, smem, st);
  case 192: return launch_2byte<192>(a, nblocks, smem, st);
  case 224: return launch_2byte<224>(a, nblocks, smem, st);
  case 256: return launch_2byte<256>(a, nblocks, smem, st);
  default: return no_kernel(dstate);
  }
}

}  // namespace mtp
}  // namespace mamba_ssu
