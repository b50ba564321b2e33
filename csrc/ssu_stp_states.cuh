// ssu_stp_states.cuh — what the single-token compiled-in kernels for a BF16, F32 or I16 state
// share (ssu_stp_states.cu, ssu_stp_states_i16.cu): the launcher's config families and the
// launch of a plan's kernel. Templates only: a unit instantiates the kernels it launches.
#pragma once

#include "checks.h"
#include "common.cuh"
#include "launch.h"
#include "ssu.cuh"
#include "tuning.h"

namespace mamba_ssu {
namespace ssu {
namespace states {

// The launcher's config families (StpStateFamily) as templates of ssu.cu's five parameters, for
// a wrapper W of a hot config (the state wrappers Bf16State, F32State, I16State; the input
// wrapper F16Inputs of ssu_with_f16_inputs.cu).
template <template <class> class W>
struct Families {
  template <bool kSimple, int kRounds, int kU, bool kGate, int kZW>
  using Dim64 = W<HotConfig<kSimple, kRounds, kU, kGate, kZW>>;
  template <bool kSimple, int kRounds, int kU, bool kGate, int kZW>
  using RtDim = W<HotDimConfig<kSimple, kRounds, kU, kGate, kZW>>;
  template <bool kSimple, int kRounds, int kU, bool kGate, int kZW>
  using Ds64 = W<HotDsConfig<64, kSimple, kRounds, kU, kGate>>;
  template <bool kSimple, int kRounds, int kU, bool kGate, int kZW>
  using Ds256 = W<HotDsConfig<256, kSimple, kRounds, kU, kGate>>;
};

namespace launcher {

// Cfg's kernel; an int16 state's (scaled_state) with its decode scales `sc`.
template <class Cfg>
int launch(const Args &a, unsigned blocks, int warps_per_block, cudaStream_t stream,
           const ScaleArgs *sc) {
  if constexpr (scaled_state<Cfg>()) {
    ssu_kernel_scaled<Cfg><<<blocks, 32 * warps_per_block, 0, stream>>>(a, *sc);
  } else {
    ssu_kernel<Cfg><<<blocks, 32 * warps_per_block, 0, stream>>>(a);
  }
  return check_launch("selective_state_update launch");
}

// The kernels ssu.cu's launch_hot_shape picks without SR: 2-row chunks on small grids (the
// one-row kernels have SR only), else 4-row chunks in the grid-size form (kZW: 1 from
// tuning::Tuning::kLargeGridRows rows on); with and without z.
template <template <bool, int, int, bool, int> class H, bool kSimple>
int launch_layout(const Args &a, unsigned blocks, int wpb, cudaStream_t st, int64_t rows,
                  int small_rows, const ScaleArgs *sc) {
  const bool z = a.z != nullptr;
  if (small_rows == 2)
    return z ? launch<H<kSimple, 0, 2, true, -1>>(a, blocks, wpb, st, sc)
             : launch<H<kSimple, 0, 2, false, -1>>(a, blocks, wpb, st, sc);
  if (small_rows != 0) return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "no one-row kernel without SR");
  if (rows >= tuning::Tuning::kLargeGridRows)
    return z ? launch<H<kSimple, 0, 4, true, 1>>(a, blocks, wpb, st, sc)
             : launch<H<kSimple, 0, 4, false, 1>>(a, blocks, wpb, st, sc);
  return z ? launch<H<kSimple, 0, 4, true, 0>>(a, blocks, wpb, st, sc)
           : launch<H<kSimple, 0, 4, false, 0>>(a, blocks, wpb, st, sc);
}

template <template <bool, int, int, bool, int> class H>
int launch_family(const Args &a, unsigned blocks, int wpb, cudaStream_t st, int64_t rows,
                  int small_rows, bool simple, const ScaleArgs *sc) {
  return simple ? launch_layout<H, true>(a, blocks, wpb, st, rows, small_rows, sc)
                : launch_layout<H, false>(a, blocks, wpb, st, rows, small_rows, sc);
}

template <template <class> class W>
int launch_state(const Args &a, StpStateFamily family, unsigned blocks, int wpb, cudaStream_t st,
                 int64_t rows, int small_rows, bool simple, const ScaleArgs *sc) {
  using F = Families<W>;
  switch (family) {
  case StpStateFamily::kDim64:
    return launch_family<F::template Dim64>(a, blocks, wpb, st, rows, small_rows, simple, sc);
  case StpStateFamily::kRtDim:
    return launch_family<F::template RtDim>(a, blocks, wpb, st, rows, small_rows, simple, sc);
  case StpStateFamily::kDs64:
    return launch_family<F::template Ds64>(a, blocks, wpb, st, rows, small_rows, simple, sc);
  case StpStateFamily::kDs256:
    return launch_family<F::template Ds256>(a, blocks, wpb, st, rows, small_rows, simple, sc);
  }
  return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "unknown state kernel family");
}

}  // namespace launcher
}  // namespace states
}  // namespace ssu
}  // namespace mamba_ssu
