// ssu_hot_launch.cuh — the launch of a hot single-token kernel family by the plan's shape: the
// kernel of a config (launch), and of a family H of HotConfig's five template parameters (layout,
// rounds, rows per chunk, z, grid-size form) by the plan's chunk rows, layout, rounds, z and grid
// size (launch_hot_shape). Templates only: a unit instantiates the kernels it launches (ssu.cu:
// the bf16-input families; ssu_with_f16_inputs.cu: the fp16-input ones).
#pragma once

#include "checks.h"
#include "common.cuh"
#include "ssu.cuh"
#include "tuning.h"

namespace mamba_ssu {
namespace ssu {
namespace hot {

using tuning::Tuning;

template <class Cfg>
int launch(const Args &a, unsigned blocks, int warps_per_block, cudaStream_t stream) {
  ssu_kernel<Cfg><<<blocks, 32 * warps_per_block, 0, stream>>>(a);
  return check_launch("selective_state_update launch");
}

// Grid-size forms (HotConfig's kZW: 0 below Tuning::kLargeGridRows rows, 1 from there on) of
// three 4-row kernels: 10 rounds simple (pad zeroing word by word, HotConfig::kZeroWords, and
// zero-page pad reads on large grids), 10 rounds vertical and without SR (the vector x and output
// pointer, HotConfig::kVecX, on large grids only for the former, on small grids only for the
// latter); tuning.h has the choices.

// H: a family of HotConfig's five template parameters (HotConfig: dim 64; HotDimConfig: head_dim
// at run time; HotDs<64>, HotDs<256>; their fp16-input forms).
template <template <bool, int, int, bool, int> class H, bool kSimple, int kU, bool kGate>
int launch_hot_z(const Args &a, unsigned blocks, int warps_per_block, cudaStream_t stream,
                 bool large) {
  switch (a.philox_rounds) {
  case 0:
    // Grids without SR small enough for one-row chunks take 2-row ones (small_grid_rows).
    if constexpr (kU == 1) {
      (void)large;
      return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "no one-row kernel without SR");
    } else {
      return large
                 ? launch<H<kSimple, 0, kU, kGate, 1>>(a, blocks, warps_per_block, stream)
                 : launch<H<kSimple, 0, kU, kGate, 0>>(a, blocks, warps_per_block, stream);
    }
  case 5: return launch<H<kSimple, 5, kU, kGate, -1>>(a, blocks, warps_per_block, stream);
  default:
    if constexpr (kU > 1) {
      return large
                 ? launch<H<kSimple, 10, kU, kGate, 1>>(a, blocks, warps_per_block, stream)
                 : launch<H<kSimple, 10, kU, kGate, 0>>(a, blocks, warps_per_block, stream);
    } else {
      return launch<H<kSimple, 10, kU, kGate, -1>>(a, blocks, warps_per_block, stream);
    }
  }
}

// The hot kernels are instantiated with and without z (HotConfig::kZ).
template <template <bool, int, int, bool, int> class H, bool kSimple, int kU>
int launch_hot(const Args &a, unsigned blocks, int warps_per_block, cudaStream_t stream,
               int64_t rows) {
  const bool large = rows >= Tuning::kLargeGridRows;
  return a.z != nullptr
             ? launch_hot_z<H, kSimple, kU, true>(a, blocks, warps_per_block, stream, large)
             : launch_hot_z<H, kSimple, kU, false>(a, blocks, warps_per_block, stream, large);
}

// The 2-row kernels of small grids (small_grid_rows): without SR (both layouts), 5 rounds
// (both), 10 rounds (simple only, with the aggregate pad zeroing that the 4-row kernel uses on
// such grids); with and without z.
template <template <bool, int, int, bool, int> class H, bool kSimple>
int launch_small2(const Args &a, unsigned blocks, int warps_per_block, cudaStream_t stream) {
  const bool z = a.z != nullptr;
  switch (a.philox_rounds) {
  case 0:
    return z ? launch<H<kSimple, 0, 2, true, -1>>(a, blocks, warps_per_block, stream)
             : launch<H<kSimple, 0, 2, false, -1>>(a, blocks, warps_per_block, stream);
  case 5:
    return z ? launch<H<kSimple, 5, 2, true, -1>>(a, blocks, warps_per_block, stream)
             : launch<H<kSimple, 5, 2, false, -1>>(a, blocks, warps_per_block, stream);
  default:
    if constexpr (kSimple) {
      return z ? launch<H<true, 10, 2, true, 0>>(a, blocks, warps_per_block, stream)
               : launch<H<true, 10, 2, false, 0>>(a, blocks, warps_per_block, stream);
    } else {
      return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "no 2-row kernel for 10 vertical rounds");
    }
  }
}

// A hot kernel of family H by chunk rows and layout.
template <template <bool, int, int, bool, int> class H>
int launch_hot_shape(const Args &a, unsigned blocks, int wpb, cudaStream_t st, int64_t rows,
                     int small_rows, bool simple) {
  return small_rows == 1 ? (simple ? launch_hot<H, true, 1>(a, blocks, wpb, st, rows)
                                   : launch_hot<H, false, 1>(a, blocks, wpb, st, rows))
         : small_rows == 2 ? (simple ? launch_small2<H, true>(a, blocks, wpb, st)
                                     : launch_small2<H, false>(a, blocks, wpb, st))
                           : (simple ? launch_hot<H, true, 4>(a, blocks, wpb, st, rows)
                                     : launch_hot<H, false, 4>(a, blocks, wpb, st, rows));
}

}  // namespace hot
}  // namespace ssu
}  // namespace mamba_ssu
