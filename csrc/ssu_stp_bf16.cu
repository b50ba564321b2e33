// ssu_stp_bf16.cu — the single-token SSU's compiled-in kernels for a BF16 state (no SR): the
// hot kernels' code (HotConfig, HotDimConfig, HotDsConfig; ssu.cuh) with the state widened from
// bf16 and rounded to nearest bf16 (Bf16State), launched for plans of ssu.cu. A translation unit
// of its own, sorted after the other kernels' units, so that the device link keeps the F16
// kernels' code and layout as they were.
#include "checks.h"
#include "common.cuh"
#include "launch.h"
#include "ssu.cuh"
#include "tuning.h"

namespace mamba_ssu {
namespace ssu {

namespace {

using tuning::Tuning;

// Base's kernel for a BF16 state: the same layouts, loads, stores and arithmetic; only the state
// element's conversions differ (the two-byte element read as bf16, the new state rounded to
// nearest bf16, as FlashInfer converts a bf16 state). No SR: FlashInfer rounds stochastically
// into an fp16 state only (the check refuses SR with any other state).
template <class Base>
struct Bf16State : Base {
  static_assert(Base::kKernel.rounds == 0, "a BF16 state has no stochastic rounding");
  __device__ explicit Bf16State(const Args &a) : Base(a) {}
  __device__ static float state_value(const typename Base::Raw &r, int i) {
    return bf16_bits_to_float(Base::pair_elem(r, i));
  }
  __device__ static uint32_t round_nearest(float v) { return float_to_bf16_bits_rn(v); }
};

// The launcher's config families (StpBf16Family) as templates of ssu.cu's five parameters.
template <bool kSimple, int kRounds, int kU, bool kGate, int kZW>
using Dim64 = Bf16State<HotConfig<kSimple, kRounds, kU, kGate, kZW>>;
template <bool kSimple, int kRounds, int kU, bool kGate, int kZW>
using RtDim = Bf16State<HotDimConfig<kSimple, kRounds, kU, kGate, kZW>>;
template <int kDs>
struct Ds {
  template <bool kSimple, int kRounds, int kU, bool kGate, int kZW>
  using Cfg = Bf16State<HotDsConfig<kDs, kSimple, kRounds, kU, kGate>>;
};

template <class Cfg>
int launch(const Args &a, unsigned blocks, int warps_per_block, cudaStream_t stream) {
  ssu_kernel<Cfg><<<blocks, 32 * warps_per_block, 0, stream>>>(a);
  return check_launch("selective_state_update launch");
}

// The kernels ssu.cu's launch_hot_shape picks without SR: 2-row chunks on small grids (the
// one-row kernels have SR only), else 4-row chunks in the grid-size form (kZW: 1 from
// Tuning::kLargeGridRows rows on); with and without z.
template <template <bool, int, int, bool, int> class H, bool kSimple>
int launch_layout(const Args &a, unsigned blocks, int wpb, cudaStream_t st, int64_t rows,
                  int small_rows) {
  const bool z = a.z != nullptr;
  if (small_rows == 2)
    return z ? launch<H<kSimple, 0, 2, true, -1>>(a, blocks, wpb, st)
             : launch<H<kSimple, 0, 2, false, -1>>(a, blocks, wpb, st);
  if (small_rows != 0) return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "no one-row kernel without SR");
  if (rows >= Tuning::kLargeGridRows)
    return z ? launch<H<kSimple, 0, 4, true, 1>>(a, blocks, wpb, st)
             : launch<H<kSimple, 0, 4, false, 1>>(a, blocks, wpb, st);
  return z ? launch<H<kSimple, 0, 4, true, 0>>(a, blocks, wpb, st)
           : launch<H<kSimple, 0, 4, false, 0>>(a, blocks, wpb, st);
}

template <template <bool, int, int, bool, int> class H>
int launch_family(const Args &a, unsigned blocks, int wpb, cudaStream_t st, int64_t rows,
                  int small_rows, bool simple) {
  return simple ? launch_layout<H, true>(a, blocks, wpb, st, rows, small_rows)
                : launch_layout<H, false>(a, blocks, wpb, st, rows, small_rows);
}

}  // namespace

int launch_hot_bf16_state(const Args &a, StpBf16Family family, unsigned blocks, int wpb,
                          cudaStream_t st, int64_t rows, int small_rows, bool simple) {
  if (a.philox_rounds != 0)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "no compiled-in BF16-state kernel with SR");
  switch (family) {
  case StpBf16Family::kDim64:
    return launch_family<Dim64>(a, blocks, wpb, st, rows, small_rows, simple);
  case StpBf16Family::kRtDim:
    return launch_family<RtDim>(a, blocks, wpb, st, rows, small_rows, simple);
  case StpBf16Family::kDs64:
    return launch_family<Ds<64>::template Cfg>(a, blocks, wpb, st, rows, small_rows, simple);
  case StpBf16Family::kDs256:
    return launch_family<Ds<256>::template Cfg>(a, blocks, wpb, st, rows, small_rows, simple);
  }
  return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "unknown BF16-state kernel family");
}

}  // namespace ssu
}  // namespace mamba_ssu
