// ssu_stp_states_i16.cu — the single-token SSU's compiled-in kernels for an I16 state
// (FlashInfer's block-scaled state; no SR): the hot kernels' code (HotConfig, HotDimConfig,
// HotDsConfig; ssu.cuh) with the state dequantised and quantised per row (I16State), launched
// for plans of ssu.cu. A translation unit of its own, sorted after ssu_stp_states.cu, so that
// the BF16 and F32 kernels' unit and the device link keep their code.
#include "ssu_stp_states.cuh"

namespace mamba_ssu {
namespace ssu {
namespace states {

// Base's kernel for an int16 state (FlashInfer's block-scaled state, single token;
// docs/flashinfer-ssu.md, "int16 block-scaled state"): the same layouts, loads and stores of
// two-byte elements; a row's integers read as rn(float(q) * scale) with the read slot's decode
// scale of the row (Raw::scale, loaded by ssu_body: load_scales; 1 without scales or for a pad),
// the new row quantised by ssu_body (i16_encode_row, quantize_i16_row), as DynI16Config.
template <class Base>
struct I16State : Base {
  static_assert(Base::kKernel.rounds == 0, "an int16 state has no stochastic rounding");
  static constexpr bool kI16Scaled = true;  // scaled_state
  struct Raw : Base::Raw {
    float scale;
  };
  __device__ explicit I16State(const Args &a) : Base(a) {}
  __device__ static float state_value(const Raw &r, int i) {
    return __fmul_rn(
        static_cast<float>(static_cast<int16_t>(static_cast<uint16_t>(Base::pair_elem(r, i)))),
        r.scale);
  }
};

}  // namespace states

int launch_hot_i16(const Args &a, StpStateFamily family, unsigned blocks, int wpb,
                   cudaStream_t st, int64_t rows, int small_rows, bool simple,
                   const ScaleArgs &sc) {
  if (a.philox_rounds != 0)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "no compiled-in I16-state kernel with SR");
  return states::launcher::launch_state<states::I16State>(a, family, blocks, wpb, st, rows,
                                                          small_rows, simple, &sc);
}

}  // namespace ssu
}  // namespace mamba_ssu
