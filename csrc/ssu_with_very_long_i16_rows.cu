// ssu_with_very_long_i16_rows.cu — the multi-token kernels of an int16 block-scaled state above
// dstate 256: the long-row mtp_kernel_i16 and mtp_kernel_i16_uniform (kMtpLongRows, every dstate
// up to 512, the row's length at run time, with the shared-memory opt-in past 48 KiB:
// allow_long_smem), launched for plans of ssu_mtp.cu through ssu_uneven.cu and
// ssu_with_uniform_pairs.cu. A translation unit of its own whose name sorts after every other
// kernel unit's: these kernels' static shared memory (mtp_body's), added to an earlier unit,
// reorders the device link's shared-memory layout of other multi-token kernels (their SASS
// changes: scripts/sass_diff.sh), and here it does not. It includes ssu_mtp.cuh only, so that it
// adds no zero pages of ssu.cuh's to the library (the single-token kernel of an int16 state at
// 512, DynLongI16Config, is in ssu_uneven.cu).
#include "checks.h"
#include "common.cuh"
#include "ssu_mtp.cuh"

namespace mamba_ssu {
namespace mtp {

int launch_long_i16(const Args &a, const ScaleArgs &sc, bool uniform, unsigned nblocks,
                    size_t smem, cudaStream_t st) {
  if (uniform) {
    if (int s = allow_long_smem(mtp_kernel_i16_uniform<kMtpLongRows>, smem)) return s;
    mtp_kernel_i16_uniform<kMtpLongRows><<<nblocks, kThreads, smem, st>>>(a, sc);
  } else {
    if (int s = allow_long_smem(mtp_kernel_i16<kMtpLongRows>, smem)) return s;
    mtp_kernel_i16<kMtpLongRows><<<nblocks, kThreads, smem, st>>>(a, sc);
  }
  return check_launch("multi-token selective-state-update kernel launch");
}

}  // namespace mtp
}  // namespace mamba_ssu
