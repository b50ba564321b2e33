// ssu_uneven.cu — the generic kernels at dstate 96, the dstate between the compiled-in ones
// that FlashInfer's sm_90 module takes for every state dtype: single token DynUnevenConfig
// (ssu.cuh: FlashInfer's lane runs of 3, vertical lanes 16..31 with half the columns; at 6
// blocks per SM as DynUnevenWideConfig for calls of >= 48 MiB) and the
// horizontal kernel with 3 (6) stages a row (ssu_hz.cuh: kAnyStages), multi token mtp_kernel at
// dstate 96 (ssu_mtp.cuh: the 128-column tile with the blocks past 96 skipped); launched for
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

int launch_uneven(const Args &a, bool f32, unsigned nblocks, size_t smem, cudaStream_t st) {
  if (f32)
    mtp_kernel<false, 96, -1, 1, false, true><<<nblocks, kThreads, smem, st>>>(a);
  else
    mtp_kernel<false, 96, -1, 1, false, false><<<nblocks, kThreads, smem, st>>>(a);
  return check_launch("multi-token selective-state-update kernel launch");
}

}  // namespace mtp
}  // namespace mamba_ssu
