// launch.h — the internal entry points of the two SSU forms, shared by mamba_ssu_check /
// mamba_ssu_launch / mamba_ssu_plan (contract.cu) and the deprecated parameter-block entry
// points (ssu.cu, ssu_mtp.cu): a parameter block whose seed fields are not read (the seed comes
// as a mamba_ssu_seed; planning reads the block's philox_rounds, sr_rule and seed_next, which
// the caller sets from the seed: plan_seed_fields), and the prefetcher's link hook.
#pragma once

#include "checks.h"
#include "include/mamba_ssu.h"

namespace mamba_ssu {

// Whether the build has the compiled-in kernels for fp16 inputs and weights over an fp16, bf16
// or fp32 state, single token, and over an fp16 or bf16 state, multi token
// (ssu_with_f16_inputs.cu; the plans route such calls to them). On by default; build.rs passes
// MAMBA_SSU_F16_INPUT_KERNELS=0 when the build's environment asks for a library without them,
// whose fp16-input calls then run the run-time kernels.
#ifndef MAMBA_SSU_F16_INPUT_KERNELS
#define MAMBA_SSU_F16_INPUT_KERNELS 1
#endif
constexpr bool kF16InputKernels = MAMBA_SSU_F16_INPUT_KERNELS != 0;

// The input and weight dtypes the compiled-in kernels of both forms take: bf16 both, and (builds
// with kF16InputKernels) fp16 both over any state but an int16 one (the forms' own rules say
// which states they compile in: is_hot in ssu.cu and ssu_mtp.cu).
inline bool hot_input_dtypes(int32_t state_dtype, int32_t input_dtype, int32_t weight_dtype) {
  if (input_dtype == MAMBA_SSU_BF16 && weight_dtype == MAMBA_SSU_BF16) return true;
  return kF16InputKernels && input_dtype == MAMBA_SSU_F16 && weight_dtype == MAMBA_SSU_F16 &&
         state_dtype != MAMBA_SSU_I16;
}

// An int16 state's decode scales (FlashInfer's block-scaled state: its state_scale and, multi
// token, intermediate_state_scales), which only mamba_ssu_args carries (contract.cu; the
// deprecated parameter blocks have no int16 state): float32, element (slot, h, d) at
// data[slot * slot_stride + h * dim + d]; data nullptr: an int16 state without scales (its
// integers read as they are, written rounded and clamped to +-32767). Multi token with an int16
// intermediate buffer and scales: the buffer's step t of entry e has its scales at
// inter[((e * cache_steps + t) * nheads + h) * dim + d] for e < inter_entries (a contiguous
// (inter_entries, cache_steps, nheads, dim) tensor).
struct StateScale {
  const float *data = nullptr;
  int64_t slot_stride = 0;
  float *inter = nullptr;
  int64_t inter_entries = 0;
};

// The rules of an int16 state's decode scales both forms share (ssu_check, mtp_check): data
// 4-byte aligned, the rows of different slots apart (blocks of different batch entries write
// them).
inline int check_state_scale(const StateScale &s, int64_t nheads, int64_t dim,
                             int64_t state_cache_size) {
  if (int st = check_pointer(s.data, "state_scale", 4)) return st;
  const __int128 scale_row = static_cast<__int128>(nheads) * dim;
  if (state_cache_size > 1 && s.slot_stride < scale_row)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "state_scale: expected stride(0) >= nheads * dim (%lld: the scales of different "
                "slots must not overlap), got %lld",
                ll128(scale_row), ll(s.slot_stride));
  return MAMBA_SSU_SUCCESS;
}

// Single token (ssu.cu). ssu_check: the parameter block's own rules (sizes, dstate, pointers
// and alignment, strides, extents, grid bounds) and the seed's; ssu_launch and ssu_plan take a
// block and seed that passed it. An I16 state is taken only with `scale` given (contract.cu),
// whose rules ssu_check checks too (pointer alignment, slot stride, extent).
int ssu_check(const mamba_ssu_params *p, const mamba_ssu_seed &seed, const SeedNames &names,
              const StateScale *scale = nullptr);
int ssu_launch(mamba_ssu_stream_t stream, const mamba_ssu_params &p, const mamba_ssu_seed &seed,
               const StateScale &scale = StateScale{});
// Planning is a pure function of the checked block and a device's properties (device.cu:
// planning_props, launch_props).
int ssu_plan(const mamba_ssu_params &p, const mamba_ssu_device_props &d,
             mamba_ssu_launch_plan *out);
// ALGO_AUTO's layout for batch x nheads on device d with a head dim of dim rows and a state
// of state_dtype (FlashInfer's rule: below sm_90 SIMPLE; else SIMPLE below 2 (batch, head)
// pairs per SM and for a head dim VERTICAL does not take (vertical_dim_ok, 0.7.4's rule); from
// there on VERTICAL on the sm_90 family, and from sm_100 on VERTICAL for an
// F32 state and HORIZONTAL for a 2-byte one whose head dim its horizontal kernel takes
// (hz_dim_ok; VERTICAL for the others, FlashInfer 0.7.4's fallback)):
// MAMBA_SSU_ALGO_SIMPLE, MAMBA_SSU_ALGO_VERTICAL or MAMBA_SSU_ALGO_HORIZONTAL.
bool vertical_dim_ok(int64_t dim);
int32_t auto_algorithm(int64_t batch, int64_t nheads, int64_t dim, int32_t state_dtype,
                       const mamba_ssu_device_props &d);

// Single token in FlashInfer's horizontal mapping (ssu_single_hz.cu), for blocks that passed
// ssu_check and whose algorithm resolves to HORIZONTAL. hz_dim_ok: the head dims FlashInfer's
// horizontal kernel takes (a multiple of 64, at most 256).
bool hz_dim_ok(int64_t dim);
int hz_plan(const mamba_ssu_params &p, const mamba_ssu_device_props &d,
            mamba_ssu_launch_plan *out);
int hz_launch(mamba_ssu_stream_t stream, const mamba_ssu_params &p, const mamba_ssu_seed &seed,
              const mamba_ssu_device_props &d);

// Multi token (ssu_mtp_check.cu, ssu_mtp.cu), likewise.
// An I16 state is taken only with `scale` given, as for ssu_check.
int mtp_check(const mamba_ssu_mtp_params *p, const mamba_ssu_seed &seed, const SeedNames &names,
              const StateScale *scale = nullptr);
int mtp_launch(mamba_ssu_stream_t stream, const mamba_ssu_mtp_params &p,
               const mamba_ssu_seed &seed, const StateScale &scale = StateScale{});
int mtp_plan(const mamba_ssu_mtp_params &p, const mamba_ssu_device_props &d,
             mamba_ssu_launch_plan *out);

// The prefetcher (prefetch.cu) whose fused chain handed out `next` learns that the kernel
// writing that link was enqueued (called by mamba_ssu_launch after a successful launch whose
// seed has `chain` set).
void prefetcher_link_enqueued(mamba_ssu_prefetcher *p, const int64_t *next);

}  // namespace mamba_ssu
