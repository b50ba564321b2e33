// ssu_uneven.cu — the generic kernels at the uneven dstates (checks.h: uneven_dstate; 96, 160,
// 192 and 224), the dstates between the compiled-in ones that FlashInfer's sm_90 module takes
// for every state dtype: single token DynUnevenConfig (ssu.cuh: FlashInfer's lane runs of 3, 5,
// 6 or 7 columns, vertical lanes with fewer columns where the row ends; at 6 blocks per SM as
// DynUnevenWideConfig for calls of >= 48 MiB) and the horizontal kernel with 3 to 7 stages a row
// (twice as many of an fp32 state; ssu_hz.cuh: kAnyStages), multi token mtp_kernel at each
// (ssu_mtp.cuh: the 128- or 256-column tile with the blocks past dstate skipped); launched for
// plans of ssu.cu, ssu_single_hz.cu and ssu_mtp.cu. A translation unit of its own, sorted
// after the other SSU units, so that their kernels and the device link keep their code and
// shared-memory layout.
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

}  // namespace ssu

namespace hz {

int launch_uneven(const Args &a, int32_t state_dtype, unsigned nblocks, size_t smem,
                  cudaStream_t st) {
  switch (state_dtype) {
  case MAMBA_SSU_F16:
    hz_kernel_any_stages<MAMBA_SSU_F16, -1, false><<<nblocks, kThreadsPerBlock, smem, st>>>(a);
    break;
  case MAMBA_SSU_BF16:
    hz_kernel_any_stages<MAMBA_SSU_BF16, 0, false><<<nblocks, kThreadsPerBlock, smem, st>>>(a);
    break;
  default:
    hz_kernel_any_stages<MAMBA_SSU_F32, 0, false><<<nblocks, kThreadsPerBlock, smem, st>>>(a);
    break;
  }
  return check_launch("selective_state_update (horizontal) launch");
}

}  // namespace hz

namespace mtp {

int launch_uneven(const Args &a, int dstate, bool f32, unsigned nblocks, size_t smem,
                  cudaStream_t st) {
  switch (dstate) {
  case 96:
    if (f32)
      mtp_kernel<false, 96, -1, 1, false, true><<<nblocks, kThreads, smem, st>>>(a);
    else
      mtp_kernel<false, 96, -1, 1, false, false><<<nblocks, kThreads, smem, st>>>(a);
    break;
  case 160:
    if (f32)
      mtp_kernel<false, 160, -1, 1, false, true><<<nblocks, kThreads, smem, st>>>(a);
    else
      mtp_kernel<false, 160, -1, 1, false, false><<<nblocks, kThreads, smem, st>>>(a);
    break;
  case 192:
    if (f32)
      mtp_kernel<false, 192, -1, 1, false, true><<<nblocks, kThreads, smem, st>>>(a);
    else
      mtp_kernel<false, 192, -1, 1, false, false><<<nblocks, kThreads, smem, st>>>(a);
    break;
  default:  // 224 (the launcher passes uneven dstates only)
    if (f32)
      mtp_kernel<false, 224, -1, 1, false, true><<<nblocks, kThreads, smem, st>>>(a);
    else
      mtp_kernel<false, 224, -1, 1, false, false><<<nblocks, kThreads, smem, st>>>(a);
    break;
  }
  return check_launch("multi-token selective-state-update kernel launch");
}

}  // namespace mtp
}  // namespace mamba_ssu
