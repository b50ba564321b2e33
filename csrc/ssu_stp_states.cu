// ssu_stp_states.cu — the single-token SSU's compiled-in kernels for a BF16 or an F32 state (no
// SR): the hot kernels' code (HotConfig, HotDimConfig, HotDsConfig; ssu.cuh) with the state
// widened from bf16 and rounded to nearest bf16 (Bf16State), or held in fp32 in FlashInfer's lane
// columns for 4-byte elements (F32State), launched for plans of ssu.cu (the launch:
// ssu_stp_states.cuh; an I16 state's kernels: ssu_stp_states_i16.cu). A translation unit of its
// own, sorted after the other kernels' units, so that the device link keeps the F16 kernels' code
// and layout as they were.
#include "ssu_stp_states.cuh"

namespace mamba_ssu {
namespace ssu {

// The state wrappers live in a named namespace (not an anonymous one), so that their kernels'
// names are the same in every build and scripts/sass_diff.sh can match them.
namespace states {

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
// bytes apart). B and C (bf16) are read at the same columns. The new state is stored as computed
// (no rounding). Everything else is Base's.
template <class Base>
struct F32State : Base {
  static_assert(Base::kKernel.rounds == 0, "an F32 state has no stochastic rounding");
  static constexpr int kMaxCols = Base::kMaxCols;  // dstate / 32
  static constexpr int kRun = Base::kSimpleLayout ? (kMaxCols < 4 ? kMaxCols : 4) : 1;
  static_assert(kMaxCols % kRun == 0, "whole runs");
  struct Raw {
    uint32_t w[kMaxCols];
  };
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

  // B or C (bf16) at the lane's columns.
  __device__ static void load_cols(const void *row, int lane, float (&v)[kMaxCols]) {
    const unsigned short *p = static_cast<const unsigned short *>(row);
#pragma unroll
    for (int j = 0; j < kMaxCols / kRun; ++j) {
      const unsigned short *q = p + col(lane, kRun * j);
      if constexpr (kRun == 4) {
        const uint2 w = load_u32x2(q);
        v[4 * j] = __uint_as_float(w.x << 16);
        v[4 * j + 1] = __uint_as_float(w.x & 0xffff0000u);
        v[4 * j + 2] = __uint_as_float(w.y << 16);
        v[4 * j + 3] = __uint_as_float(w.y & 0xffff0000u);
      } else if constexpr (kRun == 2) {
        const uint32_t w = load_u32(q);
        v[2 * j] = __uint_as_float(w << 16);
        v[2 * j + 1] = __uint_as_float(w & 0xffff0000u);
      } else {
        v[j] = bf16_bits_to_float(*q);
      }
    }
  }
};

}  // namespace states

namespace {

using states::Bf16State;
using states::F32State;
using states::launcher::launch_state;

}  // namespace

int launch_hot_state(const Args &a, StpStateFamily family, unsigned blocks, int wpb,
                     cudaStream_t st, int64_t rows, int small_rows, bool simple) {
  if (a.philox_rounds != 0)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "no compiled-in BF16- or F32-state kernel with SR");
  if (a.state_dtype == MAMBA_SSU_BF16)
    return launch_state<Bf16State>(a, family, blocks, wpb, st, rows, small_rows, simple, nullptr);
  if (a.state_dtype == MAMBA_SSU_F32)
    return launch_state<F32State>(a, family, blocks, wpb, st, rows, small_rows, simple, nullptr);
  return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "no compiled-in kernel for this state dtype here");
}

}  // namespace ssu
}  // namespace mamba_ssu
