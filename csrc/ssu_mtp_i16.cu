// ssu_mtp_i16.cu — the multi-token SSU's kernels for an int16 state (FlashInfer's block-scaled
// state, no SR): the compiled-in mtp_kernel_i16_hot and the run-time mtp_kernel_i16
// (ssu_mtp.cuh), launched for plans of ssu_mtp.cu. A
// translation unit of its own, sorted after ssu_mtp.cu and ssu_mtp_bf16.cu, so that the device
// link keeps the static shared-memory layout of their kernels.
#include "checks.h"
#include "common.cuh"
#include "ssu_mtp.cuh"

namespace mamba_ssu {
namespace mtp {

namespace {

template <int kDstate>
int launch_hot_dstate(const Args &a, const ScaleArgs &sc, int rows_per_group, bool small,
                      unsigned nblocks, size_t smem, cudaStream_t st) {
  return launch_hot_form<kDstate, 0>(rows_per_group, small, [&](auto rows, auto small_grid) {
    constexpr int kR = decltype(rows)::value;
    constexpr bool kSmall = decltype(small_grid)::value;
    mtp_kernel_i16_hot<kDstate, kR, kSmall><<<nblocks, kThreads, smem, st>>>(a, sc);
    return check_launch("multi-token selective-state-update kernel launch");
  });
}

}  // namespace

int launch_hot_i16(const Args &a, const ScaleArgs &sc, int dstate, int rows_per_group, bool small,
                   unsigned nblocks, size_t smem, cudaStream_t st) {
  return with_even_dstate(dstate, [&](auto ds) {
    return launch_hot_dstate<decltype(ds)::value>(a, sc, rows_per_group, small, nblocks, smem,
                                                  st);
  });
}

int launch_i16(const Args &a, const ScaleArgs &sc, int dstate, unsigned nblocks, size_t smem,
               cudaStream_t st) {
  auto go = [&](auto kernel) {
    kernel<<<nblocks, kThreads, smem, st>>>(a, sc);
    return check_launch("multi-token selective-state-update kernel launch");
  };
  return dstate == 64    ? go(mtp_kernel_i16<64>)
         : dstate == 128 ? go(mtp_kernel_i16<128>)
                         : go(mtp_kernel_i16<256>);
}

}  // namespace mtp
}  // namespace mamba_ssu
