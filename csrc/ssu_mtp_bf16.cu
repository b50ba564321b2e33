// ssu_mtp_bf16.cu — the multi-token SSU's compiled-in kernels for a BF16 state (no SR):
// mtp_kernel_bf16 (ssu_mtp.cuh), launched for plans of ssu_mtp.cu. A translation unit of its own,
// sorted after ssu_mtp.cu, so that the device link keeps the static shared-memory layout of
// the F16 and run-time multi-token kernels.
#include "checks.h"
#include "common.cuh"
#include "ssu_mtp.cuh"

namespace mamba_ssu {
namespace mtp {

namespace {

template <int kDstate>
int launch_dstate(const Args &a, int rows_per_group, bool small, unsigned nblocks, size_t smem,
                  cudaStream_t st) {
  return launch_hot_form<kDstate, 0>(rows_per_group, small, [&](auto rows, auto small_grid) {
    constexpr int kR = decltype(rows)::value;
    constexpr bool kSmall = decltype(small_grid)::value;
    mtp_kernel_bf16<kDstate, kR, kSmall><<<nblocks, kThreads, smem, st>>>(a);
    return check_launch("multi-token selective-state-update kernel launch");
  });
}

}  // namespace

int launch_hot_bf16(const Args &a, int dstate, int rows_per_group, bool small, unsigned nblocks,
                    size_t smem, cudaStream_t st) {
  return with_even_dstate(dstate, [&](auto ds) {
    return launch_dstate<decltype(ds)::value>(a, rows_per_group, small, nblocks, smem, st);
  });
}

}  // namespace mtp
}  // namespace mamba_ssu
