// ssu_stp_states.cuh — what the single-token compiled-in kernels for a BF16, F32 or I16 state
// share (ssu_stp_states.cu, ssu_stp_states_i16.cu; with fp16 inputs ssu_with_f16_inputs.cu): the
// launcher's config families, the BF16 and F32 state wrappers and the launch of a plan's kernel.
// Templates only: a unit instantiates the kernels it launches.
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

// Base's kernel for an F32 state: a lane's columns are FlashInfer's for 4-byte elements (as the
// generic kernel maps them, DynConfig): simple, runs of min(4, dstate / 32) contiguous columns
// (one 16- or 8-byte access); vertical, one column per 32-column segment (4-byte accesses 128
// bytes apart). B and C are read at the same columns (load_cols). The new state is stored as
// computed (no rounding). Everything else is Base's.
template <class Base>
struct F32State : Base {
  static_assert(Base::kKernel.rounds == 0, "an F32 state has no stochastic rounding");
  static constexpr int kMaxCols = Base::kMaxCols;  // dstate / 32
  static constexpr int kRun = Base::kSimpleLayout ? (kMaxCols < 4 ? kMaxCols : 4) : 1;
  static_assert(kMaxCols % kRun == 0, "whole runs");
  struct Raw {
    uint32_t w[kMaxCols];
  };
  // The bulk L2 prefetch of Base (no SR) only where the launcher asks for it (Args::l2_prefetch:
  // at dstate 64 always, at 128 and 256 for calls whose state fits
  // tuning::Tuning::kF32PrefetchMaxStateBytes).
  static constexpr bool kL2PrefetchAtRunTime = true;
  __device__ explicit F32State(const Args &a) : Base(a) {}
  __device__ static constexpr int state_bytes() { return 4; }
  __device__ static constexpr int run() { return kRun; }
  __device__ static constexpr int col(int lane, int i) {
    return lane * kRun + 32 * kRun * (i / kRun) + i % kRun;
  }

  __device__ static void load_state(const void *row, int lane, Raw &r) {
    const uint32_t *p = static_cast<const uint32_t *>(row);
#pragma unroll
    for (int j = 0; j < kMaxCols / kRun; ++j) {
      const uint32_t *q = p + col(lane, kRun * j);
      if constexpr (kRun == 4) {
        const uint4 v = *reinterpret_cast<const uint4 *>(q);
        r.w[4 * j] = v.x;
        r.w[4 * j + 1] = v.y;
        r.w[4 * j + 2] = v.z;
        r.w[4 * j + 3] = v.w;
      } else if constexpr (kRun == 2) {
        const uint2 v = load_u32x2(q);
        r.w[2 * j] = v.x;
        r.w[2 * j + 1] = v.y;
      } else {
        r.w[j] = *q;
      }
    }
  }
  __device__ static float state_value(const Raw &r, int i) { return __uint_as_float(r.w[i]); }
  // Streaming stores, as HotConfig::store_state.
  __device__ static void store_state(void *row, int lane, const uint32_t (&bits)[kMaxCols]) {
    uint32_t *p = static_cast<uint32_t *>(row);
#pragma unroll
    for (int j = 0; j < kMaxCols / kRun; ++j) {
      uint32_t *q = p + col(lane, kRun * j);
      if constexpr (kRun == 4) {
        __stcs(reinterpret_cast<uint4 *>(q),
               make_uint4(bits[4 * j], bits[4 * j + 1], bits[4 * j + 2], bits[4 * j + 3]));
      } else if constexpr (kRun == 2) {
        store_cs_u32x2(q, bits[2 * j], bits[2 * j + 1]);
      } else {
        store_cs_u32(q, bits[j]);
      }
    }
  }
  __device__ static uint32_t round_nearest(float v) { return __float_as_uint(v); }

  // B or C at the lane's columns: bf16, or with kF16In fp16 (an fp16 model's; F16Inputs of
  // ssu_with_f16_inputs.cu).
  template <bool kF16In = false>
  __device__ static void load_cols(const void *row, int lane, float (&v)[kMaxCols]) {
    const unsigned short *p = static_cast<const unsigned short *>(row);
#pragma unroll
    for (int j = 0; j < kMaxCols / kRun; ++j) {
      const unsigned short *q = p + col(lane, kRun * j);
      if constexpr (kRun == 4) {
        const uint2 w = load_u32x2(q);
        if constexpr (kF16In) {
          v[4 * j] = half_bits_to_float(w.x & 0xffffu);
          v[4 * j + 1] = half_bits_to_float(w.x >> 16);
          v[4 * j + 2] = half_bits_to_float(w.y & 0xffffu);
          v[4 * j + 3] = half_bits_to_float(w.y >> 16);
        } else {
          v[4 * j] = __uint_as_float(w.x << 16);
          v[4 * j + 1] = __uint_as_float(w.x & 0xffff0000u);
          v[4 * j + 2] = __uint_as_float(w.y << 16);
          v[4 * j + 3] = __uint_as_float(w.y & 0xffff0000u);
        }
      } else if constexpr (kRun == 2) {
        const uint32_t w = load_u32(q);
        if constexpr (kF16In) {
          v[2 * j] = half_bits_to_float(w & 0xffffu);
          v[2 * j + 1] = half_bits_to_float(w >> 16);
        } else {
          v[2 * j] = __uint_as_float(w << 16);
          v[2 * j + 1] = __uint_as_float(w & 0xffff0000u);
        }
      } else {
        v[j] = kF16In ? half_bits_to_float(*q) : bf16_bits_to_float(*q);
      }
    }
  }
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
