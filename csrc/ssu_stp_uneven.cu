// ssu_stp_uneven.cu — the single-token SSU's generic kernel at the dstates between the
// compiled-in ones (DynUnevenConfig, ssu.cuh: dstate 96), launched for plans of ssu.cu. A
// translation unit of its own, sorted after the other single-token units, so that their kernels
// and the device link keep their code.
#include "common.cuh"
#include "ssu.cuh"

namespace mamba_ssu {
namespace ssu {

int launch_uneven(const Args &a, unsigned blocks, int warps_per_block, cudaStream_t stream) {
  ssu_kernel<DynUnevenConfig><<<blocks, 32 * warps_per_block, 0, stream>>>(a);
  return check_launch("selective_state_update launch");
}

}  // namespace ssu
}  // namespace mamba_ssu
