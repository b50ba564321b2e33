// ssu_with_f16_inputs.cu — the SSU's compiled-in kernels for fp16 inputs and weights (an fp16
// model: x, z, B, C, out, dt, D, dt_bias in fp16) over an fp16, bf16 or fp32 state. Single token:
// the hot kernels' code (HotConfig, HotDimConfig, HotDsConfig; ssu.cuh; with a bf16 or fp32
// state through the state wrappers of ssu_stp_states.cuh) with the input and output conversions
// of fp16 (F16Inputs), every layout, round count, chunk form and grid-size form the bf16-input
// families have, launched for plans of ssu.cu (ssu_hot_launch.cuh, ssu_stp_states.cuh). Multi
// token (an fp16 or bf16 state): the hot kernels' code with fp16 conversions (mtp_kernel_f16in,
// mtp_kernel_bf16_f16in; ssu_mtp.cuh), every round count and grid form, launched for plans of
// ssu_mtp.cu. Horizontal (single token, every state): hz_kernel_f16in (ssu_hz.cuh) in each
// form of the bf16-input kernels (any stage count, grouped copies), launched for plans of
// ssu_single_hz.cu. Compiled unless the build sets MAMBA_SSU_F16_INPUT_KERNELS=0 (build.rs;
// launch.h: kF16InputKernels; then the unit is empty, not even ssu.cuh's device globals, and
// fp16 inputs run the generic kernel). A translation unit of its own whose name sorts after every
// other kernel unit's, so that the other units and the device link keep their code.
#if MAMBA_SSU_F16_INPUT_KERNELS
#include "ssu_hot_launch.cuh"
#include "ssu_hz.cuh"
#include "ssu_mtp.cuh"
#include "ssu_stp_states.cuh"

namespace mamba_ssu {
namespace ssu {

// The wrapper lives in a named namespace (not an anonymous one), so that its kernels' names are
// the same in every build and scripts/sass_diff.sh can match them.
namespace inputs {

// Base's kernel with fp16 inputs and weights: the same layouts, state accesses, arithmetic and
// Philox mapping; only the input elements' widening (exact, as FlashInfer widens an fp16 input)
// and the output's rounding (to nearest fp16, as FlashInfer stores an fp16 out) differ. FlashInfer
// compiles its kernels per input dtype with the same summation forms (its fp16-input builds'
// first forms are its bf16-input builds': docs/perf-notes.md, "fp16 inputs run the run-time
// kernels"), so Base's compile-time first form holds.
template <class Base>
struct F16Inputs : Base {
  static constexpr int kMaxCols = Base::kMaxCols;
  static constexpr int kU = Base::kRowsPerChunk;
  __device__ explicit F16Inputs(const Args &a) : Base(a) {}

  // Base's make_key and load_key over a key table of this config's own, so that the bf16-input
  // kernels' shared-memory layout in the linked module stays as it was (OwnKeyTable).
  using Key = typename Base::Key;
  using KeyTable =
      OwnKeyTable<F16Inputs, Base::kKeyRounds, Base::kKernel.rounds, Base::kBlockKey>;
  __device__ static Key load_key() { return KeyTable::load(); }
  __device__ static Key make_key(uint64_t seed) { return KeyTable::make(seed); }

  // B or C (fp16) at the lane's columns: Base's loads of two-byte elements, widened from fp16;
  // over an fp32 state (F32State), its lane columns for 4-byte elements.
  __device__ static void load_cols(const void *row, int lane, float (&v)[kMaxCols]) {
    if constexpr (Base::state_bytes() == 4) {
      Base::template load_cols<true>(row, lane, v);
    } else {
      typename Base::Raw r;
      Base::load_pairs(row, lane, r);
#pragma unroll
      for (int i = 0; i < kMaxCols; ++i) v[i] = half_bits_to_float(Base::pair_elem(r, i));
    }
  }
  __device__ static float load_input(const void *p, int64_t idx) {
    return half_bits_to_float(static_cast<const unsigned short *>(p)[idx]);
  }
  // x of a chunk's kU rows in one load (Base::kVecX kernels; aligned as in HotConfig::load_x).
  template <class I>
  __device__ static void load_x(const void *p, I idx, float (&x)[kU]) {
    const unsigned short *q = static_cast<const unsigned short *>(p) + idx;
    if constexpr (kU == 4) {
      const uint2 v = load_u32x2(q);
      x[0] = half_bits_to_float(v.x & 0xffffu);
      x[1] = half_bits_to_float(v.x >> 16);
      x[2] = half_bits_to_float(v.y & 0xffffu);
      x[3] = half_bits_to_float(v.y >> 16);
    } else if constexpr (kU == 2) {
      const uint32_t v = load_u32(q);
      x[0] = half_bits_to_float(v & 0xffffu);
      x[1] = half_bits_to_float(v >> 16);
    } else {
      x[0] = half_bits_to_float(*q);
    }
  }
  __device__ static float load_weight(const void *p, int64_t idx) { return load_input(p, idx); }
  template <class I>
  __device__ static void store_out(void *p, I idx, float v) {
    static_cast<unsigned short *>(p)[idx] = static_cast<unsigned short>(float_to_half_bits_rn(v));
  }
};

// The launcher's families (StpStateFamily) with fp16 inputs, as templates of ssu.cu's five
// parameters (an fp16 state).
using Families = states::Families<F16Inputs>;

// A hot config with fp16 inputs over a bf16 or an fp32 state (no SR), the wrappers of
// states::launcher::launch_state.
template <class Base>
using Bf16StateF16Inputs = F16Inputs<states::Bf16State<Base>>;
template <class Base>
using F32StateF16Inputs = F16Inputs<states::F32State<Base>>;

}  // namespace inputs

// A HotDimConfig with fp16 inputs reads HotDimConfig's zero page (heads of up to 256 rows).
template <class Base>
struct IsHotDim<inputs::F16Inputs<Base>> : IsHotDim<Base> {};

int launch_hot_f16_inputs(const Args &a, StpStateFamily family, unsigned blocks, int wpb,
                          cudaStream_t st, int64_t rows, int small_rows, bool simple) {
  if (a.state_dtype == MAMBA_SSU_BF16 || a.state_dtype == MAMBA_SSU_F32) {
    if (a.philox_rounds != 0)
      return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                  "no compiled-in BF16- or F32-state kernel with SR");
    return a.state_dtype == MAMBA_SSU_BF16
               ? states::launcher::launch_state<inputs::Bf16StateF16Inputs>(
                     a, family, blocks, wpb, st, rows, small_rows, simple, nullptr)
               : states::launcher::launch_state<inputs::F32StateF16Inputs>(
                     a, family, blocks, wpb, st, rows, small_rows, simple, nullptr);
  }
  if (a.state_dtype != MAMBA_SSU_F16)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                "no compiled-in fp16-input kernel for this state dtype");
  using F = inputs::Families;
  switch (family) {
  case StpStateFamily::kDim64:
    return hot::launch_hot_shape<F::Dim64>(a, blocks, wpb, st, rows, small_rows, simple);
  case StpStateFamily::kRtDim:
    return hot::launch_hot_shape<F::RtDim>(a, blocks, wpb, st, rows, small_rows, simple);
  case StpStateFamily::kDs64:
    return hot::launch_hot_shape<F::Ds64>(a, blocks, wpb, st, rows, small_rows, simple);
  case StpStateFamily::kDs256:
    return hot::launch_hot_shape<F::Ds256>(a, blocks, wpb, st, rows, small_rows, simple);
  }
  return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "unknown fp16-input kernel family");
}

}  // namespace ssu

namespace mtp {
namespace {

// The kernel of a plan at dstate kDstate with kRounds rounds: an F16 state's (mtp_kernel_f16in),
// or a BF16 state's (mtp_kernel_bf16_f16in, no SR), in the plan's grid form (launch_hot_form).
template <int kDstate, int kRounds>
int launch_f16_inputs(const Args &a, bool bf16_state, int rows_per_group, bool small,
                      unsigned nblocks, size_t smem, cudaStream_t st) {
  return launch_hot_form<kDstate, kRounds>(rows_per_group, small, [&](auto rows, auto small_grid) {
    constexpr int kR = decltype(rows)::value;
    constexpr bool kSmall = decltype(small_grid)::value;
    if constexpr (kRounds == 0) {
      if (bf16_state) {
        mtp_kernel_bf16_f16in<kDstate, kR, kSmall><<<nblocks, kThreads, smem, st>>>(a);
        return check_launch("multi-token selective-state-update kernel launch");
      }
    }
    mtp_kernel_f16in<kDstate, kRounds, kR, kSmall><<<nblocks, kThreads, smem, st>>>(a);
    return check_launch("multi-token selective-state-update kernel launch");
  });
}

}  // namespace

int launch_hot_f16_inputs(const Args &a, bool bf16_state, int dstate, int rounds,
                          int rows_per_group, bool small, unsigned nblocks, size_t smem,
                          cudaStream_t st) {
  if (bf16_state && rounds != 0)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "no compiled-in BF16-state kernel with SR");
  return with_even_dstate(dstate, [&](auto ds) {
    return with_hot_rounds(rounds, [&](auto r) {
      return launch_f16_inputs<decltype(ds)::value, decltype(r)::value>(
          a, bf16_state, rows_per_group, small, nblocks, smem, st);
    });
  });
}

}  // namespace mtp

namespace hz {

int launch_f16_inputs(const Args &a, int32_t state_dtype, bool any_stages, bool grouped,
                      unsigned nblocks, size_t smem, cudaStream_t st) {
  return with_kernel_params(state_dtype, true, a.philox_rounds, [&](auto state, auto rounds, auto) {
    constexpr int kState = decltype(state)::value;
    constexpr int kRounds = decltype(rounds)::value;
    // with_kernel_params's run-time-rounds branch (not taken: `compiled` is true) has no kernel.
    if constexpr (kRounds < 0) {
      return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "no fp16-input horizontal kernel");
    } else {
      if (any_stages)
        hz_kernel_f16in<kState, kRounds, true, false><<<nblocks, kThreadsPerBlock, smem, st>>>(a);
      else if (grouped)
        hz_kernel_f16in<kState, kRounds, false, true><<<nblocks, kThreadsPerBlock, smem, st>>>(a);
      else
        hz_kernel_f16in<kState, kRounds, false, false><<<nblocks, kThreadsPerBlock, smem, st>>>(a);
      return check_launch("selective_state_update (horizontal) launch");
    }
  });
}

}  // namespace hz
}  // namespace mamba_ssu

#endif  // MAMBA_SSU_F16_INPUT_KERNELS
