// ssu_mtp.cuh — the multi-token selective-state-update kernel (speculative-decoding verify,
// FlashInfer 0.7.2 compatible, bit for bit): T tokens per sequence in one call, the state read
// once per sequence, carried in fp32 across its tokens and written per token. Device code:
// the kernel's arguments (Args), the per-lane column layout, the body (mtp_body) and the
// kernel template (mtp_kernel). Included by ssu_mtp.cu (host: planning, dispatch and the
// instantiations). Built on the single-token kernel's pieces: fp32_ops.cuh (FlashInfer's fp32
// operations), sr.cuh (the stochastic-rounding conversions, both rules), philox.cuh (the rounds
// and the fused seed's torch draw) and loads.cuh (dtype conversions, streaming stores).
//
// Work layout
// -----------
// Eight lanes per state row (b, h, d), as FlashInfer's multi-token kernel: lane m of a row's
// group owns 16-byte blocks of the row, one per 8 x 16 bytes, visited in column order, so that
// its even and odd partial sums and the shuffle-down tree over the group (4, 2, 1) are
// FlashInfer's. With a 2-byte (fp16, bf16) state lane m owns the columns 64 j + 8 m + i (i < 8,
// j < dstate / 64; dstate 128: 8m..8m+7 and 64+8m..64+8m+7); with an fp32 state the columns
// 32 j + 4 m + i (i < 4, j < dstate / 32; dstate 128: 4m..4m+3, 32+4m.., 64+4m.., 96+4m..), its
// own kernels (kF32). Either way a lane has dstate / 8 columns (at the uneven dstates 96, 160,
// 192 and 224 FlashInfer's tile spans the next power of two and a lane's blocks past dstate are
// skipped: mtp_tile), element e of the lane
// (mtp_col) has the parity of e, and the lane visits its elements in the order of e. A 4-warp
// block holds 16 such groups and serves one (sequence, head) and up to 64 consecutive rows of it
// (blocks_per_head blocks share a head on small grids); group k takes the block's rows k, k + 16,
// ...
//
// A block first resolves, once, everything that depends on the sequence alone (thread 0: its
// token range, read slot and seed; threads t < T: dt' and dA of token t and where token t's
// state goes) and stages the tokens' B and C rows and the block's x and z values as fp32 in
// shared memory; then every group walks its rows: it loads the row's state (the next row's
// load goes out before the current row is computed), derives the row's stochastic-rounding
// words ONCE (the token is not in FlashInfer's counter, so every token of the call rounds an
// element with the same bits; FlashInfer recomputes them at every token), and runs the T
// tokens on the fp32 state in registers, writing, where the token has a target, the rounded
// state (streaming stores: the written states are read again only at a later step) and each
// lane's partial sum to shared memory; after the row's last token lane m of the group adds the
// 8 partials of token m (and m + 8) in the shuffle tree's order and writes that out element.
// With a seed in memory the first rows' words are derived before the block's barrier.
//
// Kernels: one row per group (small and mid grids) or two rows sharing each token's B/C loads
// (from Tuning::kMtpTwoRowPairs (sequence, head) pairs; without SR four rows from
// Tuning::kMtpFourRowPairs, so that a block writes its 64 rows token by token; at most two at
// dstate 256, mtp_max_rows); on grids within their floor of blocks per SM
// (Tuning::kMtpSmallBlocks; at dstate 256 kMtpDs256Small*) the one-row "small" kernels, where a
// call is latency: their token loop has no branch (predicated stores; with SR the rare row
// whose conversion needs the exact path is replayed from the state as read after its last
// token) and is unrolled so that consecutive tokens overlap. The compiled-in ("hot") kernels
// serve an F16 state with BF16 inputs and weights at dstate 64, 128 and 256 and 0, 5 or 10
// rounds (any head dim), and a BF16 state likewise without SR (mtp_kernel_bf16); the run-time
// ones every other call.
//
// Numerics per token, exactly FlashInfer's (every operation pinned; the build flushes
// subnormals): dt' = rn(dt + dt_bias), softplus when enabled and dt' <= 20; dA =
// ex2(rn(rn(A * dt') * L2E)); dtx = rn(dt' * x); with bf16 inputs even columns
// s = fma(dA, s, rn(B * dtx)), odd columns s = fma(B, dtx, rn(dA * s)), with fp16 or fp32
// inputs every column the odd one's (mtp_step_pair); acc_even = fma(s, C, acc_even) over the even
// columns and acc_odd likewise, in the lane's column order, from 0; the lane's partial =
// rn(acc_even + acc_odd); the group's sum by shuffle-down 4, 2, 1; y = fma(D, x, partial),
// gated by z as single token, rounded to nearest into out. out uses the fp32 state (it does
// not depend on stochastic rounding).
//
// Stochastic-rounding words: columns in pairs; column c takes word (c mod 4) >> 1 of Philox
// with counter word 0 = low32(read_slot * state stride + h * dim * dstate + d * dstate +
// 4 floor(c / 4)), word 1 = 0xFFFFFFFF when bit 31 of word 0 is set (the offset truncated to
// 32 bits and sign-extended), words 2, 3 = 0; bits 12..0 for even c, 28..16 for odd c. A lane
// keeps the 13-bit numbers of its columns (dstate / 8) in registers for all tokens.
//
// Each lane reads its state elements before it writes them, and a row's elements are
// written by the lane that read them, so a call whose read slot is also a write target
// (in-place verify) is race-free; as in FlashInfer, a slot one sequence writes that another
// sequence reads is a caller error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "common.cuh"
#include "fp32_ops.cuh"
#include "include/mamba_ssu.h"
#include "loads.cuh"
#include "philox.cuh"
#include "sr.cuh"
#include "tuning.h"

namespace mamba_ssu {
namespace mtp {

using tuning::Tuning;

using ssu::bf16_bits_to_float;
using ssu::half_bits_to_float;
using ssu::load_float;
using ssu::load_index;

constexpr int kThreads = 128;             // 4 warps
constexpr int kGroupLanes = 8;            // lanes per state row
constexpr int kGroups = kThreads / kGroupLanes;  // rows in flight per block
constexpr int kMaxRowsPerBlock = 64;      // rows staged per block (x, z)
constexpr int kMaxTokens = MAMBA_SSU_MTP_MAX_TOKENS;

// Everything the kernel reads, filled by the launcher from a checked mamba_ssu_mtp_params.
struct Args {
  const void *x, *dt, *dt_bias, *B, *C, *D, *z;
  const float *A;
  void *out, *state, *inter;
  const void *sbi, *dst, *nat, *cu, *inter_idx;
  const int64_t *rand_seed;
  const uint64_t *gen_seed, *gen_offset;  // device generator state (or nullptr)
  int64_t *seed_next;
  uint64_t seed_offset, generator_seed;

  int64_t state_stride;
  int64_t x_sb, x_st, dt_sb, dt_st, B_sb, B_st, C_sb, C_st, z_sb, z_st, out_sb, out_st;
  int64_t sbi_s, sbi_sc, sbi_cols, dst_s, dst_sc, nat_s, cu_s, ii_s;
  int64_t pad_slot_id, state_cache_size, inter_cache_size, cache_steps, total_tokens;

  uint32_t nheads, heads_per_group, blocks_per_head;
  // Multiply-shift forms of the divisions by blocks_per_head, nheads and heads_per_group
  // (mtp_fast_div; set by the launcher with mtp_fast_div_params).
  uint32_t bph_mul, bph_shr, nh_mul, nh_shr, hpg_mul, hpg_shr;
  int32_t ntokens, dim, dstate, rows_per_block;
  int32_t philox_rounds, sr_rule;
  int32_t state_dtype, input_dtype, weight_dtype, index_dtype;
  int32_t dt_softplus, update_state, seed_source, varlen;
  // The dtypes of num_accepted_tokens and cu_seqlens (FlashInfer takes them independently of
  // the slot indices'), read by the run-time kernels; the compiled-in ones read index_dtype
  // (the launcher runs them only where the two agree with it). Appended last, as 16-bit values
  // in what was the struct's tail padding: the fields above keep their offsets and the struct
  // its size (every kernel's parameter block is unchanged).
  int16_t nat_dtype, cu_dtype;
};

// An int16 state's decode scales (mtp_kernel_i16; FlashInfer's block-scaled state), a kernel
// argument of their own so that Args (every other kernel's parameter block) is unchanged:
// state_scale (slots, nheads, dim) at slot * slot_stride + h * dim + d, nullptr without scales;
// inter_scales (inter_entries, cache_steps, nheads, dim) contiguous, the int16 intermediate
// buffer's (nullptr without the buffer or without scales).
struct ScaleArgs {
  float *state_scale;
  int64_t slot_stride;
  float *inter_scales;
  int64_t inter_entries;
};

// Whether a kernel stages B and C as bf16 bits (else fp32): the hot one-row kernels (tuning.h).
__host__ __device__ constexpr bool mtp_bf16_stage(bool hot, int rows_per_group) {
  return hot && rows_per_group == 1 && Tuning::kMtpOneRowBf16Stage;
}

// Floats per row group in the buffer of deferred lane partials (the hot kernels): R x ntokens x
// 8, rounded up to a multiple of 32 plus 8, so that the 4 groups of a warp write to disjoint
// banks.
__host__ __device__ constexpr int mtp_part_stride(int ntokens, int rows_per_group) {
  return (rows_per_group * ntokens * kGroupLanes + 31) / 32 * 32 + 8;
}

// Dynamic shared memory of a block: B and C of every token (ntokens x dstate, bf16 bits or fp32
// each); the lane partials of every group when the kernel defers its row sums (defer_rows = the
// rows a group computes together, 0 when it does not); then x and z of the block's rows for
// every token (ntokens x rows_per_block fp32 each); and with several rows per group, (rows - 1)
// x kGroups floats past them: a group's last pass fetches x of its rows past the block's end
// too (the values are unused: those rows are never stored), which at the last token reads up to
// that far past the x (or z) rows.
__host__ __device__ constexpr size_t mtp_smem_bytes(int ntokens, int dstate, int rows_per_block,
                                                    bool has_z, bool bf16_stage, int defer_rows) {
  return (bf16_stage ? 2 : 4) * 2 * static_cast<size_t>(ntokens) * dstate +
         (defer_rows > 0
              ? sizeof(float) * kGroups * static_cast<size_t>(mtp_part_stride(ntokens, defer_rows))
              : 0) +
         sizeof(float) * static_cast<size_t>(ntokens) * rows_per_block * (has_z ? 2 : 1) +
         (defer_rows > 1 ? sizeof(float) * kGroups * static_cast<size_t>(defer_rows - 1) : 0);
}

// The kDstate of the long-row kernels: a row of a.dstate columns, known at run time (every
// dstate above 256, up to 512: checks.h, long_dstate), over FlashInfer's tile of 512 columns
// (mtp_tile). One kernel per state kind serves them all instead of one per dstate (the library's
// size and its build time); the row length is a run-time value in their address arithmetic and
// in the skip of a lane's blocks past the row (mtp_body: ds).
constexpr int kMtpLongRows = -1;

// The columns a lane group's register tile spans: dstate (64, 128, 256), or at an uneven dstate
// (checks.h: uneven_dstate) FlashInfer's next power of two, 128, 256 or (above 256, and the
// long-row kernels' kMtpLongRows) 512, and 64 below 64 (an fp32 state at 32 or 48: FlashInfer's
// tile of 32 at 32 holds the same lane blocks as the first half of 64; mtp_body: the lanes'
// blocks past dstate are skipped). Also the stride of the staged B and C rows (mtp_smem_bytes
// takes it as its `dstate`).
__host__ __device__ constexpr int mtp_tile(int dstate) {
  return dstate == 64 || dstate == 128 || dstate == 256 ? dstate
         : dstate == kMtpLongRows || dstate > 256       ? 512
         : dstate <= 64                                 ? 64
         : dstate <= 128                                ? 128
                                                        : 256;
}

// Whether a dstate is uneven (mtp_tile spans more columns than the row has; kMtpLongRows always
// is: its rows may end anywhere in the tile).
__host__ __device__ constexpr bool mtp_uneven(int dstate) { return mtp_tile(dstate) != dstate; }

// n / d for n < 2^31 and d >= 1 as a multiply and a shift (mtp_fast_div_params gives mul and
// shr; d = 1 is passed through): with l = ceil(log2 d), mul = ceil(2^(31 + l) / d) and shr =
// l - 1, floor(n * mul / 2^(31 + l)) = floor(n / d) because n * (mul * d - 2^(31 + l)) < 2^31 * d
// <= 2^(31 + l). Block decoding runs three of them per thread.
__host__ __device__ constexpr void mtp_fast_div_params(uint32_t d, uint32_t *mul, uint32_t *shr) {
  uint32_t l = 0;
  while ((uint64_t{1} << l) < d) ++l;
  *mul = d <= 1 ? 0u : static_cast<uint32_t>(((uint64_t{1} << (31 + l)) + d - 1) / d);
  *shr = d <= 1 ? 0u : l - 1;
}
__device__ __forceinline__ uint32_t mtp_fast_div(uint32_t n, uint32_t d, uint32_t mul,
                                                 uint32_t shr) {
  return d == 1 ? n : __umulhi(n, mul) >> shr;
}

// One token's update of an even and an odd state column, FlashInfer's operations. kUniform
// false (FlashInfer's kernels with bf16 inputs): even s = fma(dA, s, rn(B * dtx)), odd
// s = fma(B, dtx, rn(dA * s)); kUniform (its kernels with fp16 or fp32 inputs, every state
// dtype): both columns the odd one's. FlashInfer writes the pair update as plain multiply-adds,
// which its build contracts one way or the other by the input dtype (docs/flashinfer-ssu.md,
// "Multi-token"; uniform_pairs below).
template <bool kUniform = false>
__device__ __forceinline__ void mtp_step_pair(float dA, float b_even, float b_odd, float dtx,
                                              float &se, float &so) {
  if constexpr (kUniform) {
    se = __fmaf_rn(b_even, dtx, __fmul_rn(dA, se));
  } else {
    se = __fmaf_rn(dA, se, __fmul_rn(b_even, dtx));
  }
  so = __fmaf_rn(b_odd, dtx, __fmul_rn(dA, so));
}

// Whether a call with inputs of `input_dtype` takes the uniform pair update (mtp_step_pair): every
// input dtype but bf16, as FlashInfer's kernels contract it (read from the SASS of its sm_90
// multi-token kernels, 0.7.2.post1 and 0.7.4, for every state, input and weight dtype:
// docs/flashinfer-ssu.md).
__host__ __device__ constexpr bool uniform_pairs(int32_t input_dtype) {
  return input_dtype != MAMBA_SSU_BF16;
}

// Column of a lane's element i (lane m of the row's 8): 64 (i / 8) + 8 m + i % 8 (2-byte state),
// 32 (i / 4) + 4 m + i % 4 (kF32: fp32 state). Elements 8 k .. 8 k + 7 are the columns
// 64 k + 8 m .. +7, or 64 k + 4 m .. +3 and 64 k + 32 + 4 m .. +3 (kF32).
template <bool kF32 = false>
__device__ __forceinline__ int mtp_col(int m, int i) {
  return kF32 ? 32 * (i / 4) + 4 * m + (i % 4) : 64 * (i / 8) + 8 * m + (i % 8);
}

// Whether element i of lane m lies in a row of `dstate` columns: at an uneven dstate (mtp_tile) a
// lane's blocks past column dstate do not. `dstate` is a compile-time constant but in the
// long-row kernels (kMtpLongRows). Called only under `if constexpr (mtp_uneven(kDstate))`, so
// that the other kernels' code is as it was without it.
template <bool kF32>
__device__ __forceinline__ bool mtp_in_row(int m, int i, int dstate) {
  return mtp_col<kF32>(m, i) < dstate;
}

// The 8 fp16 or bf16 elements at p (16-byte aligned) widened to fp32.
template <bool kHalf>
__device__ __forceinline__ void widen8(const uint4 &v, float *out) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (kHalf) {
      out[2 * k] = half_bits_to_float(w[k] & 0xffffu);
      out[2 * k + 1] = half_bits_to_float(w[k] >> 16);
    } else {
      out[2 * k] = bf16_bits_to_float(w[k] & 0xffffu);
      out[2 * k + 1] = bf16_bits_to_float(w[k] >> 16);
    }
  }
}

// The 8 int16 elements at p widened to fp32 with the row's decode scale f: rn(float(q) * f)
// (FlashInfer's dequantisation, its own rounded multiply).
__device__ __forceinline__ void widen8_i16(const uint4 &v, float f, float *out) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    out[2 * k] = __fmul_rn(static_cast<float>(static_cast<int16_t>(w[k] & 0xffffu)), f);
    out[2 * k + 1] = __fmul_rn(static_cast<float>(static_cast<int16_t>(w[k] >> 16)), f);
  }
}

// An int16 row's encode factor from the fp32 values s of this lane's columns (a group of 8
// lanes holds the row; `gmask` its lanes): with scales, m = max |s| over the row (fmaxf from
// -FLT_MAX: NaN ignored; a butterfly, as the order does not change a maximum), e = 1 when m is 0
// (under -ftz: also a subnormal m), else rn(rcp.approx(m) * 32767); without scales e = 1.
// `scaled` is uniform over the group.
template <int N>
__device__ __forceinline__ float i16_encode(const float (&s)[N], unsigned gmask, bool scaled) {
  if (!scaled) return 1.0f;
  float mx = -3.40282347e38f;
#pragma unroll
  for (int i = 0; i < N; ++i) mx = fmaxf(mx, fabsf(s[i]));
  mx = fmaxf(mx, __shfl_xor_sync(gmask, mx, 4, kGroupLanes));
  mx = fmaxf(mx, __shfl_xor_sync(gmask, mx, 2, kGroupLanes));
  mx = fmaxf(mx, __shfl_xor_sync(gmask, mx, 1, kGroupLanes));
  return mx == 0.0f ? 1.0f : __fmul_rn(ssu::rcp_approx(mx), 32767.0f);
}

// i16_encode over the lane's columns that lie in a row of `dstate` columns (an uneven dstate,
// mtp_tile: the blocks past dstate hold no state and are left out of the row's max, as
// FlashInfer's kernel skips them).
template <int N>
__device__ __forceinline__ float i16_encode_in_row(const float (&s)[N], int m, int dstate,
                                                   unsigned gmask, bool scaled) {
  if (!scaled) return 1.0f;
  float mx = -3.40282347e38f;
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (mtp_in_row<false>(m, i, dstate)) mx = fmaxf(mx, fabsf(s[i]));
  mx = fmaxf(mx, __shfl_xor_sync(gmask, mx, 4, kGroupLanes));
  mx = fmaxf(mx, __shfl_xor_sync(gmask, mx, 2, kGroupLanes));
  mx = fmaxf(mx, __shfl_xor_sync(gmask, mx, 1, kGroupLanes));
  return mx == 0.0f ? 1.0f : __fmul_rn(ssu::rcp_approx(mx), 32767.0f);
}

// One element quantised with encode factor e: rni(min(max(rn(v * e), -32767), 32767)) (a NaN
// product reads -32767), its 16 bits.
__device__ __forceinline__ uint32_t i16_quantize(float v, float e) {
  const float c = fminf(fmaxf(__fmul_rn(v, e), -32767.0f), 32767.0f);
  return static_cast<uint32_t>(__float2int_rn(c)) & 0xffffu;
}

// The state stores stream (st.global.cs: the written states are read again only at a later
// step); plain, .cg and L1::no_allocate stores were no faster (perf-notes: the multi-token
// kernel's latency, store backpressure (2026-12-01); the goal's figure, per-warp bulk stores,
// store operators (2026-12-02)).
// A streaming 16-byte store under a predicate (a predicated instruction, never a branch, so that
// the code around it stays one block for the scheduler); addr is only dereferenced when pred.
// No memory clobber: the kernel never reads what it stores, so other accesses may move past it.
__device__ __forceinline__ void stcs_if(bool pred, uintptr_t addr, const uint4 &v) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %0, 0;\n\t"
      "@p st.global.cs.v4.b32 [%1], {%2, %3, %4, %5};\n\t}" ::"r"(static_cast<int>(pred)),
      "l"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
// A streaming 16-byte state store.
template <typename T>
__device__ __forceinline__ void st_state(T *p, const T &v) {
  __stcs(p, v);
}

// kHot: F16 state (kBf16State: BF16, kI16: I16, no SR), BF16 inputs and weights (kF16In: FP16,
// below) (vector state and B/C
// accesses); otherwise every dtype at run time. kDstate: 64, 128 or 256; in the run-time kernels
// also the uneven dstates up to 256 (96: the 128-column tile, kTile) and kMtpLongRows (every
// dstate above 256, a.dstate, over the 512-column tile). kRounds: 0, 5, 10 compiled in; -1 at
// run time.
// kR: rows a group computes together (1, or 2 and 4 in the hot kernels for large grids).
// kF32 (run-time kernels only): an fp32 state, in FlashInfer's 4-column lane blocks (mtp_col),
// with vector state loads and no stochastic rounding (it needs an F16 state). The launcher runs
// every fp32 state there; the other run-time kernels' fp32 branches (the 8-column map) are kept
// as they were, so that their code is unchanged, and are not launched.
// kI16: an int16 state (the run-time mtp_kernel_i16, or with kHot mtp_kernel_i16_hot; `sc` its
// scales): read as rn(float(q) * the read slot's decode scale of the row) before the first token, carried in
// fp32, and each written step's row quantised from that step's fp32 values (FlashInfer's block
// scaling: the row's max |s| over its 8 lanes, the encode factor rn(rcp.approx(max) * 32767), 1
// for a zero row or without scales; q = rni(clamp(rn(s * e), +-32767)); the decode scale
// rcp.approx(e) stored by lane 0 at the target's scale row: the dst or read slot's, or the
// intermediate entry's step). No stochastic rounding (FlashInfer's rule).
// kF16In (with kHot, an F16 or a BF16 state): FP16 inputs and weights instead of BF16
// (mtp_kernel_f16in, mtp_kernel_bf16_f16in): the same staging of B and C as 2-byte bits, widened
// from fp16, and `out` rounded to fp16; its update is the uniform pair form.
// kUniform (run-time kernels, every state dtype: mtp_kernel_uniform, mtp_kernel_f32_uniform,
// mtp_kernel_i16_uniform): the uniform pair update (mtp_step_pair) for calls whose inputs are not
// bf16 (uniform_pairs); the other run-time kernels keep the mixed form of bf16 inputs.
template <bool kHot, int kDstate, int kRounds, int kR, bool kSmall, bool kF32 = false,
          bool kBf16State = false, bool kI16 = false, bool kF16In = false,
          bool kUniform = false>
__device__ __forceinline__ void mtp_body(const Args &a, const ScaleArgs &sc = ScaleArgs{}) {
  static_assert(!kF16In || (kHot && !kI16), "kF16In: the hot kernels of an F16 or a BF16 state");
  static_assert(!kUniform || !kHot, "kUniform: the run-time kernels");
  static_assert(!kF32 || (!kHot && kR == 1 && !kSmall), "kF32: the run-time kernels");
  static_assert(!kI16 || (!kF32 && !kBf16State && (kHot ? kRounds == 0 : kR == 1 && !kSmall)),
                "kI16: the run-time one-row kernel, or hot kernels without SR");
  static_assert(!kBf16State || (kHot && kRounds == 0), "kBf16State: hot kernels without SR");
  static_assert(!mtp_uneven(kDstate) || (!kHot && kR == 1 && !kSmall),
                "an uneven dstate: the run-time kernels");
  // The lane's tile: kDstate columns, or the next power of two at an uneven dstate (mtp_tile),
  // where a lane's blocks at columns >= kDstate are not loaded, updated, summed nor stored
  // (FlashInfer's kernel skips them): at 96 a 2-byte state's second block for lanes 4..7, an
  // fp32 state's fourth 4-column block.
  constexpr int kTile = mtp_tile(kDstate);
  constexpr int NC = kTile / 8;  // columns per lane
  constexpr int NP = NC / 2;       // column pairs per lane
  // The row's columns: kDstate, or a.dstate in the long-row kernels (kMtpLongRows). Every use of
  // the row length at run time (addresses, targets, staging, Philox counters, the skip of blocks
  // past the row) reads it here, so that in the other kernels it folds to the constant.
  const int ds = kDstate == kMtpLongRows ? a.dstate : kDstate;
  const int32_t sdt = kHot ? (kBf16State ? MAMBA_SSU_BF16 : kI16 ? MAMBA_SSU_I16 : MAMBA_SSU_F16)
                     : kF32 ? MAMBA_SSU_F32
                            : a.state_dtype;
  const int32_t idt = kHot ? (kF16In ? MAMBA_SSU_F16 : MAMBA_SSU_BF16) : a.input_dtype;
  const int32_t wdt = kHot ? (kF16In ? MAMBA_SSU_F16 : MAMBA_SSU_BF16) : a.weight_dtype;
  const int rounds = kRounds >= 0 ? kRounds : kF32 ? 0 : a.philox_rounds;

  __shared__ char *s_tgt[kMaxTokens];   // token t's state target: row 0 of the head, or nullptr
  __shared__ char *s_out[kMaxTokens];   // token t's out row: element 0 of the head
  __shared__ float s_dtp[kMaxTokens], s_dA[kMaxTokens];
  __shared__ uint64_t s_seed;
  extern __shared__ __align__(16) unsigned char smem[];
  // Hot kernels of an int16 state: token t's decode-scale row at its target (element 0 of the
  // head's dim rows), or nullptr (no target, no scales, an entry past intermediate_state_scales).
  // Declared only in those kernels, so that the others' static shared memory is unchanged.
  [[maybe_unused]] float **s_sct = nullptr;
  if constexpr (kHot && kI16) {
    __shared__ float *s_sct_i16[kMaxTokens];
    s_sct = s_sct_i16;
  }

  // A fused chain's next link: the grid's extra first block stores the stock draw that follows
  // this call's position (the next call's seed) and does nothing else.
  if (a.seed_next != nullptr && blockIdx.x == 0) {
    if (threadIdx.x == 0)
      store_next_link(a.seed_next, a.gen_seed, a.gen_offset, a.generator_seed, a.seed_offset);
    return;
  }
  const uint32_t block = blockIdx.x - (a.seed_next != nullptr ? 1u : 0u);
  const uint32_t bh = mtp_fast_div(block, a.blocks_per_head, a.bph_mul, a.bph_shr);
  const int part = static_cast<int>(block - bh * a.blocks_per_head);
  const uint32_t b32 = mtp_fast_div(bh, a.nheads, a.nh_mul, a.nh_shr);
  const int64_t b = b32;
  const uint32_t h32 = bh - b32 * a.nheads;
  const int64_t h = h32;
  const int64_t g = mtp_fast_div(h32, a.heads_per_group, a.hpg_mul, a.hpg_shr);
  const int dim = a.dim;
  const int row0 = part * a.rows_per_block;
  const int rows = min(a.rows_per_block, dim - row0);
  const int64_t head_elems = h * dim * ds;
  const int tid = threadIdx.x;

  // The sequence's tokens and read slot, by every thread (the same few loads, served once per
  // warp): no barrier before the first state load, which goes out right after.
  int64_t tok0 = 0, len64 = a.ntokens;
  if (a.varlen) {
    const int32_t cdt = kHot ? a.index_dtype : a.cu_dtype;
    const int64_t lo = load_index(a.cu, b * a.cu_s, cdt);
    const int64_t hi = load_index(a.cu, (b + 1) * a.cu_s, cdt);
    // Offsets outside 0..=total_tokens or decreasing: the sequence is skipped.
    const bool ok = lo >= 0 && lo <= hi && hi <= a.total_tokens;
    tok0 = ok ? lo : 0;
    len64 = ok ? min(hi - lo, static_cast<int64_t>(a.ntokens)) : 0;
  }
  const int len = static_cast<int>(len64);
  if (len == 0) return;  // block-uniform
  int64_t read_slot = b;
  bool pad = false;
  if (a.sbi != nullptr) {
    int64_t k = 0;
    if (a.sbi_cols > 0 && a.nat != nullptr) {
      k = load_index(a.nat, b * a.nat_s, kHot ? a.index_dtype : a.nat_dtype) - 1;
      k = k < 0 ? 0 : k;
    }
    if (a.sbi_cols > 0 && k >= a.sbi_cols) {
      pad = true;
    } else {
      read_slot = load_index(a.sbi, b * a.sbi_s + k * a.sbi_sc, a.index_dtype);
    }
  }
  pad = pad || read_slot == a.pad_slot_id || read_slot < 0 || read_slot >= a.state_cache_size;

  const int grp = tid / kGroupLanes;
  const int m = tid % kGroupLanes;
  const int esize = kHot ? 2 : (sdt == MAMBA_SSU_F32 ? 4 : 2);
  char *const state = static_cast<char *>(a.state);
  const char *read_head =
      pad ? nullptr : state + (read_slot * a.state_stride + head_elems) * esize;

  // Rows a group computes together (they share each token's B and C loads): rows d, d + 16,
  // ..., d + 16 (kR - 1) of the block.
  constexpr int R = kR;
  // B and C staged as bf16 bits (the hot one-row kernels: half the shared traffic, a lane's 8
  // columns one 16-byte word) or fp32 (no per-token conversion, worth it when two rows share it).
  constexpr bool kBf16Stage = mtp_bf16_stage(kHot, kR);
  // The hot kernels defer a row's sums: each token's lane partials go to shared memory, and
  // after the row's last token lane m adds the 8 partials of token m (and m + 8) in the
  // shuffle-down tree's order and writes its out element (no shuffles, and the per-token
  // epilogue is not run by one lane in eight).
  constexpr bool kDefer = kHot;
  // R rows' state at the lane's columns, raw (hot: a 16-byte word per 64 columns and row).
  struct Raw {
    uint4 v[R][kHot ? NC / 8 : 1];
    float f[kHot && kI16 ? R : 1];  // hot int16: the rows' decode scales at the read slot
  };
  // Loads the rows d0 + r * kGroups (r < R) that lie in the block.
  auto load_raw = [&](int d0, Raw &raw) {
    if constexpr (kHot) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int d = d0 + r * kGroups;
        if (d < row0 + rows) {
          const char *row = read_head + static_cast<int64_t>(d) * ds * 2;
#pragma unroll
          for (int j = 0; j < NC / 8; ++j)
            raw.v[r][j] = __ldcs(reinterpret_cast<const uint4 *>(row + 2 * (64 * j + 8 * m)));
          if constexpr (kI16)
            raw.f[r] = sc.state_scale != nullptr
                           ? sc.state_scale[read_slot * sc.slot_stride + h * dim + d]
                           : 1.0f;
        }
      }
    }
  };
  // The group's first rows go out before the staging below.
  Raw next{};
  if (kHot && !pad && grp < rows) load_raw(row0 + grp, next);

  // Token rows of the token tensors: fixed length (b, t) with a batch and a token stride,
  // varlen row tok0 + t with the token stride.
  auto tok_off = [&](int64_t sb, int64_t st, int t) -> int64_t {
    return a.varlen ? (tok0 + t) * st : b * sb + t * st;
  };

  // Per token t (threads t < len): dt', dA and its state target; thread 0: the seed; all:
  // the staging of B, C, x, z.
  if (tid == 0) {
    uint64_t seed = 0;
    if (rounds > 0 && !pad) {
      if (a.seed_source == MAMBA_SSU_SEED_POINTER) {
        seed = static_cast<uint64_t>(*a.rand_seed);
      } else if (a.seed_source == MAMBA_SSU_SEED_FROM_GENERATOR) {
        seed = static_cast<uint64_t>(torch_seed_draw(*a.gen_seed, *a.gen_offset + a.seed_offset));
      } else {
        seed = static_cast<uint64_t>(torch_seed_draw(a.generator_seed, a.seed_offset));
      }
    }
    s_seed = seed;
  }
  bool writes = false;  // whether this thread's token has a state target
  if (tid < len) {
    const int t = tid;
    float dt = load_float(a.dt, tok_off(a.dt_sb, a.dt_st, t) + h, wdt);
    if (a.dt_bias != nullptr) dt = __fadd_rn(dt, load_float(a.dt_bias, h, wdt));
    if (a.dt_softplus != 0 && dt <= 20.0f) dt = ssu::softplus(dt);  // NaN skips
    s_dtp[t] = dt;
    s_dA[t] = ssu::ex2_approx(__fmul_rn(__fmul_rn(a.A[h], dt), ssu::kL2E));
    const int ibytes_out = kHot ? 2 : (idt == MAMBA_SSU_F32 ? 4 : 2);
    s_out[t] = static_cast<char *>(a.out) + (tok_off(a.out_sb, a.out_st, t) + h * dim) * ibytes_out;
    int64_t tgt = -1;
    if (!pad) {
      if (a.inter != nullptr) {
        const int64_t e =
            a.inter_idx != nullptr ? load_index(a.inter_idx, b * a.ii_s, a.index_dtype) : read_slot;
        // Any entry inside the buffer, pad_slot_id's value included (FlashInfer indexes the
        // buffer with it unchecked; an entry outside it is not written).
        if (e >= 0 && e < a.inter_cache_size)
          tgt = ((e * a.cache_steps + t) * a.nheads + h) * dim * ds;
      } else if (a.dst != nullptr) {
        const int64_t s = load_index(a.dst, b * a.dst_s + t * a.dst_sc, a.index_dtype);
        if (s != a.pad_slot_id && s >= 0 && s < a.state_cache_size)
          tgt = s * a.state_stride + head_elems;
      } else if (a.update_state != 0 && t == len - 1) {
        tgt = read_slot * a.state_stride + head_elems;
      }
    }
    char *const base = static_cast<char *>(a.inter != nullptr ? a.inter : a.state);
    s_tgt[t] = tgt >= 0 ? base + tgt * esize : nullptr;
    writes = tgt >= 0;
    if constexpr (kHot && kI16) {
      // The target's scale row: the intermediate entry's step (element offset / dstate of the
      // target row 0), or the slot's; none past intermediate_state_scales (FlashInfer writes
      // past it) or without scales.
      float *row = nullptr;
      if (tgt >= 0 && sc.state_scale != nullptr) {
        if (a.inter != nullptr) {
          const int64_t at = tgt / ds;  // ((e * cache_steps + t) * nheads + h) * dim
          if (at / (static_cast<int64_t>(a.nheads) * dim) < sc.inter_entries * a.cache_steps)
            row = sc.inter_scales + at;
        } else {
          row = sc.state_scale + (tgt - head_elems) / a.state_stride * sc.slot_stride + h * dim;
        }
      }
      s_sct[t] = row;
    }
  }
  const bool has_z = a.z != nullptr;
  // Staged B and C. bf16 bits: a lane's 8 columns are one 16-byte word at 8m of the 64-column
  // run. fp32: each run swizzled so that a lane's 8 columns are two 16-byte words at 4m and
  // 32 + 4m; kF32: not swizzled, a lane's 4-column blocks are those words already. Either way
  // the 8 lanes of a row read 128 contiguous bytes per load (no bank conflict).
  using Stage = typename std::conditional<kBf16Stage, uint16_t, float>::type;
  Stage *const sB = reinterpret_cast<Stage *>(smem);
  Stage *const sC = sB + a.ntokens * kTile;
  const int part_stride = kDefer ? mtp_part_stride(a.ntokens, R) : 0;
  float *const sp = reinterpret_cast<float *>(sC + a.ntokens * kTile);  // lane partials
  float *const sx = sp + kGroups * part_stride;
  float *const sz = sx + a.ntokens * a.rows_per_block;
  {
    const int ibytes = kHot ? 2 : (idt == MAMBA_SSU_F32 ? 4 : 2);
    // B and C: 8 elements (columns 8q..8q+7, q = 8j + m') per thread and step of the loop.
    const int per_tok = ds / 8;
    for (int j = tid; j < 2 * len * per_tok; j += kThreads) {
      const bool is_c = j >= len * per_tok;
      const int jj = is_c ? j - len * per_tok : j;
      const int t = jj / per_tok;
      const int q = jj - t * per_tok;
      const int64_t off = (is_c ? tok_off(a.C_sb, a.C_st, t) : tok_off(a.B_sb, a.B_st, t)) +
                          g * ds + 8 * q;
      const void *src = is_c ? a.C : a.B;
      if constexpr (kBf16Stage) {
        *reinterpret_cast<uint4 *>((is_c ? sC : sB) + t * kTile + 8 * q) =
            *reinterpret_cast<const uint4 *>(static_cast<const char *>(src) + off * 2);
        continue;
      }
      float f[8];
      if (kHot || ibytes == 2) {
        const uint4 v = *reinterpret_cast<const uint4 *>(static_cast<const char *>(src) + off * 2);
        if (kHot ? kF16In : idt == MAMBA_SSU_F16) widen8<true>(v, f); else widen8<false>(v, f);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) f[k] = static_cast<const float *>(src)[off + k];
      }
      if constexpr (kF32) {
        float *dst = reinterpret_cast<float *>((is_c ? sC : sB) + t * kTile + 8 * q);
        *reinterpret_cast<float4 *>(dst) = make_float4(f[0], f[1], f[2], f[3]);
        *reinterpret_cast<float4 *>(dst + 4) = make_float4(f[4], f[5], f[6], f[7]);
        continue;
      }
      float *run = reinterpret_cast<float *>((is_c ? sC : sB) + t * kTile + 64 * (q / 8));
      const int mq = q % 8;
      *reinterpret_cast<float4 *>(run + 4 * mq) = make_float4(f[0], f[1], f[2], f[3]);
      *reinterpret_cast<float4 *>(run + 32 + 4 * mq) = make_float4(f[4], f[5], f[6], f[7]);
    }
    // x and z of token t, the block's row r.
    auto stage_x = [&](int t, int r) {
      const int64_t d = row0 + r;
      sx[t * a.rows_per_block + r] = load_float(a.x, tok_off(a.x_sb, a.x_st, t) + h * dim + d, idt);
      if (has_z)
        sz[t * a.rows_per_block + r] =
            load_float(a.z, tok_off(a.z_sb, a.z_st, t) + h * dim + d, idt);
    };
    if constexpr (kSmall) {
      // Item j: token j >> rsh, row j & (2^rsh - 1), 2^rsh the power of two at or above rows
      // (shifts instead of a division by rows: the prologue is a large part of a small grid's
      // call; in the other kernels this form cost registers, 2026-12-01T23:19/5).
      const int rsh = 32 - __clz(rows - 1);
      for (int j = tid; j < (len << rsh); j += kThreads) {
        const int r = j & ((1 << rsh) - 1);
        if (r < rows) stage_x(j >> rsh, r);
      }
    } else {
      for (int j = tid; j < len * rows; j += kThreads) {
        const int t = j / rows;
        stage_x(t, j - t * rows);
      }
    }
  }
  // Philox element offset of the head (READ slot), truncated to 32 bits below.
  const uint64_t sr_head =
      static_cast<uint64_t>(read_slot) * static_cast<uint64_t>(a.state_stride) +
      static_cast<uint64_t>(head_elems);
  // The stochastic-rounding words of the rows d0 + r * kGroups, once for all tokens: word p
  // of the lane's Philox calls feeds its column pair p (columns mtp_col(m, 2p), +1: bits
  // 12..0 and 28..16). (SR needs an F16 state: the kF32 kernels have none.)
  uint32_t wrd[R][NP];
  auto row_words = [&](int d0, uint64_t seed) {
    const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int q = 0; q < NC / 4; ++q) {
        const uint32_t lo = static_cast<uint32_t>(
            sr_head + static_cast<uint64_t>(d0 + r * kGroups) * ds +
            static_cast<uint64_t>(mtp_col(m, 4 * q)));
        const U32x4 c{lo, static_cast<uint32_t>(static_cast<int32_t>(lo) >> 31), 0u, 0u};
        U32x4 w;
        if constexpr (kRounds > 0) {
          w = philox4x32<kRounds>(c, k0, k1);
        } else {
          w = philox4x32_dyn(c, k0, k1, rounds);
        }
        wrd[r][2 * q] = w.x;
        wrd[r][2 * q + 1] = w.y;
      }
    }
  };
  // With the seed in memory every thread reads it and derives its first rows' words here,
  // while the staging loads are in flight (off the critical path of small grids).
  const bool early_words =
      rounds > 0 && a.seed_source == MAMBA_SSU_SEED_POINTER && !pad && grp < rows;
  if (early_words) row_words(row0 + grp, static_cast<uint64_t>(*a.rand_seed));

  const bool any_write = __syncthreads_or(writes) != 0;  // the block's one barrier

  const bool sr = rounds > 0 && any_write;
  const uint64_t seed = s_seed;
  const float Dh = a.D != nullptr ? load_float(a.D, h, wdt) : 0.0f;
  const unsigned gmask = 0xffu << (tid & 24);  // this group's lanes within the warp
  float *const gpart = sp + grp * part_stride;  // this group's lane partials (kDefer)

  for (int d0 = row0 + grp; d0 < row0 + rows; d0 += R * kGroups) {
    bool ok[R];  // group-uniform: row d0 + r * kGroups lies in the block
#pragma unroll
    for (int r = 0; r < R; ++r) ok[r] = d0 + r * kGroups < row0 + rows;

    // The rows' words (before the state is widened: the Philox work overlaps the load).
    if (sr && !(early_words && d0 == row0 + grp)) row_words(d0, seed);
    // The rows' state in fp32 (a row past the block computes zeros, never stored).
    float s[R][NC];
    Raw cur{};  // hot: the rows' state as read (the small SR kernels replay from it)
    if constexpr (kHot) {
      cur = next;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (!pad && ok[r]) {
#pragma unroll
          for (int j = 0; j < NC / 8; ++j) {
            if constexpr (kI16)
              widen8_i16(cur.v[r][j], cur.f[r], s[r] + 8 * j);
            else
              widen8<!kBf16State>(cur.v[r][j], s[r] + 8 * j);
          }
        } else {
#pragma unroll
          for (int i = 0; i < NC; ++i) s[r][i] = 0.0f;
        }
      }
      if (!pad && d0 + R * kGroups < row0 + rows) load_raw(d0 + R * kGroups, next);
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int64_t d = d0 + r * kGroups;
        if constexpr (kF32) {
          // The lane's 4-column blocks, one 16-byte load each.
#pragma unroll
          for (int j = 0; j < NC / 4; ++j) {
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if constexpr (mtp_uneven(kDstate)) {
              if (!pad && ok[r] && mtp_in_row<true>(m, 4 * j, ds))
                v = *reinterpret_cast<const float4 *>(reinterpret_cast<const float *>(read_head) +
                                                      d * ds + mtp_col<true>(m, 4 * j));
            } else if (!pad && ok[r])
              v = *reinterpret_cast<const float4 *>(reinterpret_cast<const float *>(read_head) +
                                                    d * ds + mtp_col<true>(m, 4 * j));
            s[r][4 * j] = v.x;
            s[r][4 * j + 1] = v.y;
            s[r][4 * j + 2] = v.z;
            s[r][4 * j + 3] = v.w;
          }
        } else if constexpr (kI16) {
          // The row's decode scale at the read slot (none is read for a pad).
          const float f = sc.state_scale != nullptr && !pad && ok[r]
                              ? sc.state_scale[read_slot * sc.slot_stride + h * dim + d]
                              : 1.0f;
#pragma unroll
          for (int i = 0; i < NC; ++i) {
            if constexpr (mtp_uneven(kDstate)) {
              if (!mtp_in_row<false>(m, i, ds)) {
                s[r][i] = 0.0f;
                continue;
              }
            }
            s[r][i] = pad || !ok[r]
                          ? 0.0f
                          : __fmul_rn(static_cast<float>(reinterpret_cast<const int16_t *>(
                                          read_head)[d * ds + mtp_col(m, i)]),
                                      f);
          }
        } else {
#pragma unroll
          for (int i = 0; i < NC; ++i) {
            if constexpr (mtp_uneven(kDstate)) {
              s[r][i] = pad || !ok[r] || !mtp_in_row<false>(m, i, ds)
                            ? 0.0f
                            : load_float(read_head, d * ds + mtp_col(m, i), sdt);
            } else {
              s[r][i] =
                  pad || !ok[r] ? 0.0f : load_float(read_head, d * ds + mtp_col(m, i), sdt);
            }
          }
        }
      }
    }

    // Token t's B and C at the lane's elements 8j .. 8j + 7 (mtp_col; bf16 bits: one 16-byte
    // word each; fp32: 4m and 32 + 4m of the 64-column run, swizzled or (kF32) not).
    auto load_bc = [&](int t, int j, float *bv, float *cv) {
      const Stage *Bt = sB + t * kTile;
      const Stage *Ct = sC + t * kTile;
      if constexpr (kBf16Stage) {
        widen8<kF16In>(*reinterpret_cast<const uint4 *>(Bt + 64 * j + 8 * m), bv);
        if (cv != nullptr)
          widen8<kF16In>(*reinterpret_cast<const uint4 *>(Ct + 64 * j + 8 * m), cv);
      } else {
        const int n0 = 64 * j + 4 * m;
        const float4 b0 = *reinterpret_cast<const float4 *>(Bt + n0);
        const float4 b1 = *reinterpret_cast<const float4 *>(Bt + n0 + 32);
        bv[0] = b0.x; bv[1] = b0.y; bv[2] = b0.z; bv[3] = b0.w;
        bv[4] = b1.x; bv[5] = b1.y; bv[6] = b1.z; bv[7] = b1.w;
        if (cv != nullptr) {
          const float4 c0 = *reinterpret_cast<const float4 *>(Ct + n0);
          const float4 c1 = *reinterpret_cast<const float4 *>(Ct + n0 + 32);
          cv[0] = c0.x; cv[1] = c0.y; cv[2] = c0.z; cv[3] = c0.w;
          cv[4] = c1.x; cv[5] = c1.y; cv[6] = c1.z; cv[7] = c1.w;
        }
      }
    };
    // The small SR kernels: whether a token of the row needed the exact conversion.
    bool need_exact = false;
    // One token of the rows (run for t = 0 .. len - 1 below); kRule: the SR rule
    // (MAMBA_SSU_SR_V072 or _V074), a compile-time fact so that the body has no branch on it.
    // A token's shared-memory operands.
    struct Tok {
      float dtp, dA, x[R];
      uint4 b[kBf16Stage ? NC / 8 : 1], c[kBf16Stage ? NC / 8 : 1];  // bf16 staging
    };
    auto fetch = [&](int t, Tok &k) {
      k.dtp = s_dtp[t];
      k.dA = s_dA[t];
#pragma unroll
      for (int r = 0; r < R; ++r) k.x[r] = sx[t * a.rows_per_block + (d0 + r * kGroups - row0)];
      if constexpr (kBf16Stage) {
#pragma unroll
        for (int j = 0; j < NC / 8; ++j) {
          k.b[j] = *reinterpret_cast<const uint4 *>(sB + t * kTile + 64 * j + 8 * m);
          k.c[j] = *reinterpret_cast<const uint4 *>(sC + t * kTile + 64 * j + 8 * m);
        }
      }
    };
    auto token = [&](int t, auto rule) {
      constexpr int kRule = decltype(rule)::value;
      Tok cur;
      fetch(t, cur);
      float dtx[R], acc_e[R], acc_o[R];
      const float dA = cur.dA;
      const float *const x = cur.x;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        dtx[r] = __fmul_rn(cur.dtp, x[r]);
        acc_e[r] = 0.0f;
        acc_o[r] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < NC / 8; ++j) {
        float bv[8], cv[8];
        if constexpr (kBf16Stage) {
          widen8<kF16In>(cur.b[j], bv);
          widen8<kF16In>(cur.c[j], cv);
        } else {
          load_bc(t, j, bv, cv);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int i = 0; i < 8; i += 2) {
            if constexpr (mtp_uneven(kDstate)) {
              if (!mtp_in_row<kF32>(m, 8 * j + i, ds)) continue;
            }
            float &se = s[r][8 * j + i];
            float &so = s[r][8 * j + i + 1];
            mtp_step_pair<kF16In || kUniform>(dA, bv[i], bv[i + 1], dtx[r], se, so);
            acc_e[r] = __fmaf_rn(se, cv[i], acc_e[r]);
            acc_o[r] = __fmaf_rn(so, cv[i + 1], acc_o[r]);
          }
        }
      }
      char *const out_row = s_out[t];
      float part_lane[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        part_lane[r] = __fadd_rn(acc_e[r], acc_o[r]);
        if constexpr (kDefer) {
          gpart[(r * a.ntokens + t) * kGroupLanes + m] = part_lane[r];
          continue;
        }
        float y = part_lane[r];
        y = __fadd_rn(y, __shfl_down_sync(gmask, y, 4, kGroupLanes));
        y = __fadd_rn(y, __shfl_down_sync(gmask, y, 2, kGroupLanes));
        y = __fadd_rn(y, __shfl_down_sync(gmask, y, 1, kGroupLanes));
        const int d = d0 + r * kGroups;
        if (m == 0 && ok[r]) {
          y = __fmaf_rn(Dh, x[r], y);
          if (has_z) y = ssu::gate(y, sz[t * a.rows_per_block + (d - row0)]);
          ssu::store_float(out_row, d, idt, y);
        }
      }

      char *const head = s_tgt[t];
      // The branch-free paths' store of row r's fp16 (kBf16State: bf16) bits (predicated on a
      // target and the row).
      auto store_row_if = [&](int r, const uint32_t *h2) {
        const uintptr_t row = reinterpret_cast<uintptr_t>(head) +
                              static_cast<uintptr_t>(d0 + r * kGroups) * ds * 2;
#pragma unroll
        for (int j = 0; j < NC / 8; ++j)
          stcs_if(head != nullptr && ok[r], row + 2 * (64 * j + 8 * m),
                  uint4{h2[4 * j], h2[4 * j + 1], h2[4 * j + 2], h2[4 * j + 3]});
      };
      if constexpr (kHot && kRounds == 0) {
        // Without SR the body has no branch: the conversion always runs and only the stores
        // are predicated, so that unrolled tokens form one block the compiler can interleave
        // (one token's sums with the next token's state update).
        [[maybe_unused]] float *const sct = kI16 ? s_sct[t] : nullptr;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          uint32_t h2[NP];
          if constexpr (kI16) {
            // The int16 quantisation of the row (as the run-time kernel's, below); the decode
            // scale stored by lane 0 under the same predicate as the row.
            const float e = i16_encode(s[r], gmask, sc.state_scale != nullptr);
            if (m == 0 && sct != nullptr && ok[r]) sct[d0 + r * kGroups] = ssu::rcp_approx(e);
#pragma unroll
            for (int p = 0; p < NP; ++p)
              h2[p] = i16_quantize(s[r][2 * p], e) | (i16_quantize(s[r][2 * p + 1], e) << 16);
          } else {
#pragma unroll
            for (int p = 0; p < NP; ++p) {
              if constexpr (kBf16State) {
                const __nv_bfloat162 v = __floats2bfloat162_rn(s[r][2 * p], s[r][2 * p + 1]);
                h2[p] = *reinterpret_cast<const uint32_t *>(&v);
              } else {
                const __half2 v = __floats2half2_rn(s[r][2 * p], s[r][2 * p + 1]);
                h2[p] = *reinterpret_cast<const uint32_t *>(&v);
              }
            }
          }
          store_row_if(r, h2);
        }
        return;
      }
      // Row r's fast SR conversion; returns whether the exact one is needed.
      auto sr_fast = [&](int r, uint32_t *h2) -> bool {
        if constexpr (kRule == MAMBA_SSU_SR_V074) {
          uint32_t flags = 0;
#pragma unroll
          for (int p = 0; p < NP; ++p) {
            const uint32_t w = wrd[r][p];
            h2[p] = ssu::sr_pair_fast(s[r][2 * p], s[r][2 * p + 1], w & 0x1fffu,
                                      (w >> 16) & 0x1fffu, flags);
          }
          return ssu::sr_needs_exact(flags);
        } else {
          uint32_t hmax = ssu::kSrMaxInit;
#pragma unroll
          for (int p = 0; p < NP; ++p) {
            const uint32_t w = wrd[r][p];
            h2[p] = ssu::sr_pair_fast_low<true, false, false>(s[r][2 * p], s[r][2 * p + 1], w,
                                                              w >> 16, hmax);
          }
          return ssu::sr_chunk_bad<false>(hmax, part_lane[r]);
        }
      };
      if constexpr (kSmall && kRounds > 0) {
        // Small grids with SR: no branch either. The fast conversion is stored; a row that
        // needed the exact one at any token is replayed after its last token (below), which
        // rewrites every state it stored.
#pragma unroll
        for (int r = 0; r < R; ++r) {
          uint32_t h2[NP];
          need_exact |= sr_fast(r, h2);
          store_row_if(r, h2);
        }
        return;
      }
      if (head == nullptr) return;  // block-uniform
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (!ok[r]) continue;  // group-uniform
        char *const row = head + static_cast<int64_t>(d0 + r * kGroups) * ds * esize;
        if constexpr (kI16) {
          const int d = d0 + r * kGroups;
          // The scale row of this head at the target: an intermediate entry's step (its
          // element offset / dstate is ((e * cache_steps + t) * nheads + h) * dim), else the
          // slot's. An entry past intermediate_state_scales (FlashInfer writes past it) is
          // not written.
          float *scale_head = nullptr;
          if (sc.state_scale != nullptr) {
            if (a.inter != nullptr) {
              const int64_t at = (head - static_cast<char *>(a.inter)) / 2 / ds;
              if (at / (static_cast<int64_t>(a.nheads) * dim) >= sc.inter_entries * a.cache_steps)
                continue;  // group-uniform
              scale_head = sc.inter_scales + at;
            } else {
              const int64_t slot =
                  ((head - static_cast<char *>(a.state)) / 2 - head_elems) / a.state_stride;
              scale_head = sc.state_scale + slot * sc.slot_stride + h * dim;
            }
          }
          float e;
          if constexpr (mtp_uneven(kDstate))
            e = i16_encode_in_row(s[r], m, ds, gmask, scale_head != nullptr);
          else
            e = i16_encode(s[r], gmask, scale_head != nullptr);  // group-uniform
          if (scale_head != nullptr && m == 0) scale_head[d] = ssu::rcp_approx(e);
#pragma unroll
          for (int j = 0; j < NC / 8; ++j) {
            if constexpr (mtp_uneven(kDstate)) {
              if (!mtp_in_row<false>(m, 8 * j, ds)) continue;
            }
            uint32_t w[4];
#pragma unroll
            for (int k = 0; k < 4; ++k)
              w[k] = i16_quantize(s[r][8 * j + 2 * k], e) |
                     (i16_quantize(s[r][8 * j + 2 * k + 1], e) << 16);
            st_state(reinterpret_cast<uint4 *>(row + 2 * (64 * j + 8 * m)),
                     uint4{w[0], w[1], w[2], w[3]});
          }
          continue;
        }
        if (sdt == MAMBA_SSU_F16 || kHot) {
          uint32_t h2[NP];
          if (rounds > 0) {
            if (sr_fast(r, h2)) {  // rare: zero or subnormal (0.7.4), saturated, Inf or NaN results
#pragma unroll
              for (int p = 0; p < NP; ++p) {
                const uint32_t w = wrd[r][p];
                h2[p] = ssu::sr_pair_exact_rule(s[r][2 * p], s[r][2 * p + 1], w & 0x1fffu,
                                                (w >> 16) & 0x1fffu, a.sr_rule);
              }
            }
          } else {
#pragma unroll
            for (int p = 0; p < NP; ++p) {
              const __half2 v = __floats2half2_rn(s[r][2 * p], s[r][2 * p + 1]);
              h2[p] = *reinterpret_cast<const uint32_t *>(&v);
            }
          }
#pragma unroll
          for (int j = 0; j < NC / 8; ++j) {
            if constexpr (mtp_uneven(kDstate)) {
              if (!mtp_in_row<false>(m, 8 * j, ds)) continue;
            }
            uint4 v{h2[4 * j], h2[4 * j + 1], h2[4 * j + 2], h2[4 * j + 3]};
            st_state(reinterpret_cast<uint4 *>(row + 2 * (64 * j + 8 * m)), v);
          }
        } else if (sdt == MAMBA_SSU_BF16) {
#pragma unroll
          for (int j = 0; j < NC / 8; ++j) {
            if constexpr (mtp_uneven(kDstate)) {
              if (!mtp_in_row<false>(m, 8 * j, ds)) continue;
            }
            uint32_t w[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const __nv_bfloat162 v =
                  __floats2bfloat162_rn(s[r][8 * j + 2 * k], s[r][8 * j + 2 * k + 1]);
              w[k] = *reinterpret_cast<const uint32_t *>(&v);
            }
            st_state(reinterpret_cast<uint4 *>(row + 2 * (64 * j + 8 * m)),
                   uint4{w[0], w[1], w[2], w[3]});
          }
        } else {
          // fp32: elements 8j .. 8j + 3 and 8j + 4 .. 8j + 7 are 16 contiguous bytes each, at
          // mtp_col(m, 8j) and mtp_col(m, 8j + 4): 64j + 8m and 4 further, or (kF32) 64j + 4m
          // and 64j + 32 + 4m.
#pragma unroll
          for (int j = 0; j < NC / 8; ++j) {
            float *p = reinterpret_cast<float *>(row + 4 * (64 * j + (kF32 ? 4 : 8) * m));
            if constexpr (mtp_uneven(kDstate)) {
              // The two 4-column blocks, each where it lies in the row.
              if (mtp_in_row<kF32>(m, 8 * j, ds))
                st_state(reinterpret_cast<float4 *>(p), make_float4(s[r][8 * j], s[r][8 * j + 1],
                                                                    s[r][8 * j + 2],
                                                                    s[r][8 * j + 3]));
              if (mtp_in_row<kF32>(m, 8 * j + 4, ds))
                st_state(reinterpret_cast<float4 *>(p + (kF32 ? 32 : 4)),
                         make_float4(s[r][8 * j + 4], s[r][8 * j + 5], s[r][8 * j + 6],
                                     s[r][8 * j + 7]));
              continue;
            }
            st_state(reinterpret_cast<float4 *>(p),
                     make_float4(s[r][8 * j], s[r][8 * j + 1], s[r][8 * j + 2], s[r][8 * j + 3]));
            st_state(reinterpret_cast<float4 *>(p + (kF32 ? 32 : 4)),
                     make_float4(s[r][8 * j + 4], s[r][8 * j + 5], s[r][8 * j + 6],
                                 s[r][8 * j + 7]));
          }
        }
      }
    };
    auto tokens = [&](auto rule) {
      if constexpr (kSmall) {
        constexpr int kUnroll = Tuning::kMtpSmallUnroll;
#pragma unroll (kUnroll)
        for (int t = 0; t < len; ++t) token(t, rule);
      } else {
        for (int t = 0; t < len; ++t) token(t, rule);
      }
    };
    if (kRounds != 0 && a.sr_rule == MAMBA_SSU_SR_V074) {
      tokens(std::integral_constant<int, MAMBA_SSU_SR_V074>{});
    } else {
      tokens(std::integral_constant<int, MAMBA_SSU_SR_V072>{});
    }

    if constexpr (kSmall && kRounds > 0) {
      // Rare: the row's states again from the state as read, every token converted exactly
      // (the same fp32 operations; out is not rewritten, it does not depend on rounding).
      if (need_exact) {
        float st[NC];
        if (!pad && ok[0]) {
#pragma unroll
          for (int j = 0; j < NC / 8; ++j) widen8<true>(cur.v[0][j], st + 8 * j);
        } else {
#pragma unroll
          for (int i = 0; i < NC; ++i) st[i] = 0.0f;
        }
        for (int t = 0; t < len; ++t) {
          const float dA = s_dA[t];
          const float dtx = __fmul_rn(s_dtp[t], sx[t * a.rows_per_block + (d0 - row0)]);
#pragma unroll
          for (int j = 0; j < NC / 8; ++j) {
            float bv[8];
            load_bc(t, j, bv, nullptr);
#pragma unroll
            for (int i = 0; i < 8; i += 2) {
              mtp_step_pair<kF16In || kUniform>(dA, bv[i], bv[i + 1], dtx, st[8 * j + i],
                                                 st[8 * j + i + 1]);
            }
          }
          char *const head = s_tgt[t];
          if (head == nullptr || !ok[0]) continue;
          char *const row = head + static_cast<int64_t>(d0) * ds * 2;
#pragma unroll
          for (int j = 0; j < NC / 8; ++j) {
            uint32_t h2[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const uint32_t w = wrd[0][4 * j + k];
              h2[k] = ssu::sr_pair_exact_rule(st[8 * j + 2 * k], st[8 * j + 2 * k + 1],
                                              w & 0x1fffu, (w >> 16) & 0x1fffu, a.sr_rule);
            }
            st_state(reinterpret_cast<uint4 *>(row + 2 * (64 * j + 8 * m)),
                   uint4{h2[0], h2[1], h2[2], h2[3]});
          }
        }
      }
    }

    if constexpr (kDefer) {
      // The row sums of the tokens, lane m taking tokens m and m + 8: ((p0 + p4) + (p2 + p6)) +
      // ((p1 + p5) + (p3 + p7)) is the shuffle-down tree (4, 2, 1) over the 8 lane partials
      // (IEEE addition commutes exactly).
      __syncwarp(gmask);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int d = d0 + r * kGroups;
        if (!ok[r]) continue;  // group-uniform
        for (int t = m; t < len; t += kGroupLanes) {
          const float *pp = gpart + (r * a.ntokens + t) * kGroupLanes;
          const float4 p0 = *reinterpret_cast<const float4 *>(pp);
          const float4 p1 = *reinterpret_cast<const float4 *>(pp + 4);
          float y = __fadd_rn(__fadd_rn(__fadd_rn(p0.x, p1.x), __fadd_rn(p0.z, p1.z)),
                              __fadd_rn(__fadd_rn(p0.y, p1.y), __fadd_rn(p0.w, p1.w)));
          y = __fmaf_rn(Dh, sx[t * a.rows_per_block + (d - row0)], y);
          if (has_z) y = ssu::gate(y, sz[t * a.rows_per_block + (d - row0)]);
          ssu::store_float(s_out[t], d, idt, y);
        }
      }
      __syncwarp(gmask);  // the partials are rewritten by the next rows
    }
  }
}

// Resident blocks per SM the register budget is set for: the hot kernels' floors (tuning.h), by
// dstate (64 takes 128's), rows per group, SR and the small-grid form; 1 (no floor) for the
// run-time kernels, the long-row ones (kMtpLongRows) included: a lane there holds 64 fp32 state
// values and, with SR, 32 Philox words, which take the 255 registers a floor of 1 allows.
__host__ __device__ constexpr int mtp_min_blocks(bool hot, int dstate, int rounds, int rows,
                                                 bool small) {
  return !hot ? 1
         : dstate == 256
             ? (small       ? (rounds == 0 ? Tuning::kMtpDs256SmallBlocks
                                           : Tuning::kMtpDs256SmallSrBlocks)
                : rows == 2 ? (rounds == 0 ? Tuning::kMtpDs256TwoRowBlocks
                                           : Tuning::kMtpDs256TwoRowSrBlocks)
                            : (rounds == 0 ? Tuning::kMtpDs256Blocks : Tuning::kMtpDs256SrBlocks))
         : small       ? Tuning::kMtpSmallBlocks
         : rows == 4   ? Tuning::kMtpFourRowBlocks
         : rows == 2   ? (rounds == 0 ? Tuning::kMtpTwoRowBlocks : Tuning::kMtpTwoRowSrBlocks)
         : rounds == 0 ? Tuning::kMtpBlocks
                       : Tuning::kMtpSrBlocks;
}

// The most rows a group of the hot kernels computes together at `dstate` (tuning.h); one above
// 256 (the long-row kernels, kMtpLongRows: run-time kernels, one row per group).
__host__ __device__ constexpr int mtp_max_rows(int dstate) {
  return dstate == 256                            ? Tuning::kMtpDs256MaxRows
         : dstate == kMtpLongRows || dstate > 256 ? 1
                                                  : 4;
}

// A plan's even dstate, 64, 128 or 256 (a hot plan has no other; the uneven ones go to
// launch_uneven), as a compile-time constant: go(std::integral_constant<int, dstate>), which
// launches that dstate's kernel and returns the launch status. Every launcher of kernels at
// these dstates dispatches its dstate here.
template <class Go>
int with_even_dstate(int dstate, Go &&go) {
  return dstate == 64    ? go(std::integral_constant<int, 64>{})
         : dstate == 128 ? go(std::integral_constant<int, 128>{})
                         : go(std::integral_constant<int, 256>{});
}

// A hot plan's round count (0, 5 or 10: is_hot sends no other) likewise.
template <class Go>
int with_hot_rounds(int rounds, Go &&go) {
  return rounds == 0   ? go(std::integral_constant<int, 0>{})
         : rounds == 5 ? go(std::integral_constant<int, 5>{})
                       : go(std::integral_constant<int, 10>{});
}

// The grid form of a plan's hot kernel (mtp_plan: four rows per group without SR where the
// dstate allows it, two, or one; the small-grid form of one row), for a kernel family at
// kDstate with kRounds rounds: go(rows, small) with the form as compile-time constants
// (std::integral_constant<int, rows>, std::bool_constant<small>), which launches that kernel and
// returns the launch status. Every launcher of hot kernels picks its kernel here.
template <int kDstate, int kRounds, class Go>
int launch_hot_form(int rows_per_group, bool small, Go &&go) {
  if constexpr (kRounds == 0 && mtp_max_rows(kDstate) >= 4) {
    if (rows_per_group == 4) return go(std::integral_constant<int, 4>{}, std::false_type{});
  }
  if (rows_per_group == 2) return go(std::integral_constant<int, 2>{}, std::false_type{});
  if (rows_per_group != 1)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                "multi-token plan: no hot kernel with %d rows per group at dstate %d, %d rounds",
                rows_per_group, kDstate, kRounds);
  if (small) return go(std::integral_constant<int, 1>{}, std::true_type{});
  return go(std::integral_constant<int, 1>{}, std::false_type{});
}

// kSmall: the hot one-row kernels for grids within their floor of blocks per SM
// (Tuning::kMtpSmallBlocks; at dstate 256 kMtpDs256Small*), where a call is latency: a token loop without branches (predicated stores; with SR, a replay
// of the rare rows that need the exact conversion) unrolled so that tokens overlap.
// kF32: the run-time kernels of an fp32 state (FlashInfer's 4-column lane blocks).
template <bool kHot, int kDstate, int kRounds, int kR, bool kSmall = false, bool kF32 = false>
__global__ void __launch_bounds__(kThreads, (mtp_min_blocks(kHot, kDstate, kRounds, kR, kSmall)))
    mtp_kernel(const Args a) {
  static_assert(!kSmall || (kHot && kR == 1), "small-grid kernels: hot, one row per group");
  static_assert(kR <= mtp_max_rows(kDstate), "rows per group past the dstate's limit");
  mtp_body<kHot, kDstate, kRounds, kR, kSmall, kF32>(a);
}

// The hot kernels' code for a BF16 state (BF16 inputs and weights, no SR: stochastic rounding
// needs an F16 state): the state widened from and rounded to nearest bf16, every other
// operation and the lane map as the F16 kernels' (the run-time kernels' BF16 branch's
// arithmetic). A kernel of its own, so that the F16 kernels' names and code stay as they are.
template <int kDstate, int kR, bool kSmall = false>
__global__ void __launch_bounds__(kThreads, (mtp_min_blocks(true, kDstate, 0, kR, kSmall)))
    mtp_kernel_bf16(const Args a) {
  static_assert(!kSmall || kR == 1, "small-grid kernels: one row per group");
  static_assert(kR <= mtp_max_rows(kDstate), "rows per group past the dstate's limit");
  mtp_body<true, kDstate, 0, kR, kSmall, false, true>(a);
}

// The hot kernels' code for FP16 inputs and weights over an F16 state (an fp16 model; kF16In),
// every round count and grid form of mtp_kernel's hot kernels: only the input and output
// conversions differ. A kernel of its own, so that the others' names and code stay as they are;
// instantiated only in a build with MAMBA_SSU_F16_INPUT_KERNELS (ssu_with_f16_inputs.cu).
template <int kDstate, int kRounds, int kR, bool kSmall = false>
__global__ void __launch_bounds__(kThreads, (mtp_min_blocks(true, kDstate, kRounds, kR, kSmall)))
    mtp_kernel_f16in(const Args a) {
  static_assert(!kSmall || kR == 1, "small-grid kernels: one row per group");
  static_assert(kR <= mtp_max_rows(kDstate), "rows per group past the dstate's limit");
  mtp_body<true, kDstate, kRounds, kR, kSmall, false, false, false, true>(a);
}

// mtp_kernel_bf16's code for FP16 inputs and weights (kF16In) over a BF16 state, every grid form;
// instantiated only in a build with MAMBA_SSU_F16_INPUT_KERNELS (ssu_with_f16_inputs.cu).
template <int kDstate, int kR, bool kSmall = false>
__global__ void __launch_bounds__(kThreads, (mtp_min_blocks(true, kDstate, 0, kR, kSmall)))
    mtp_kernel_bf16_f16in(const Args a) {
  static_assert(!kSmall || kR == 1, "small-grid kernels: one row per group");
  static_assert(kR <= mtp_max_rows(kDstate), "rows per group past the dstate's limit");
  mtp_body<true, kDstate, 0, kR, kSmall, false, true, false, true>(a);
}

// The hot kernels' code for an int16 state (FlashInfer's block-scaled state; BF16 inputs and
// weights, no SR): the state dequantised with the read slot's row scales and each written
// step's row quantised (kI16, as the run-time kernel below), every other operation and the lane
// map as the F16 kernels'; `sc` its decode scales. Its own kernel, so that the others' names,
// parameter blocks, static shared memory and code stay as they are.
template <int kDstate, int kR, bool kSmall = false>
__global__ void __launch_bounds__(kThreads, (mtp_min_blocks(true, kDstate, 0, kR, kSmall)))
    mtp_kernel_i16_hot(const Args a, const ScaleArgs sc) {
  static_assert(!kSmall || kR == 1, "small-grid kernels: one row per group");
  static_assert(kR <= mtp_max_rows(kDstate), "rows per group past the dstate's limit");
  mtp_body<true, kDstate, 0, kR, kSmall, false, false, true>(a, sc);
}

// The run-time kernel of an int16 state (kI16: FlashInfer's block-scaled state, no SR), one row
// per group; `sc` its decode scales. A kernel of its own, with the scales as a second argument,
// so that the other kernels' names, parameter blocks and code stay as they are.
template <int kDstate>
__global__ void __launch_bounds__(kThreads, 1) mtp_kernel_i16(const Args a, const ScaleArgs sc) {
  mtp_body<false, kDstate, -1, 1, false, false, false, true>(a, sc);
}

// The run-time kernels with the uniform pair update (kUniform: inputs other than bf16,
// uniform_pairs), each the code of the run-time kernel of its state with only the update's
// contraction changed: an F16 or a BF16 state (mtp_kernel<false, kDstate, -1, 1>'s),
// an fp32 state (mtp_kernel<false, kDstate, -1, 1, false, true>'s) and an int16 state
// (mtp_kernel_i16's). Kernels of their own, instantiated in ssu_with_uniform_pairs.cu, so that
// the other kernels' names and code stay as they are.
template <int kDstate>
__global__ void __launch_bounds__(kThreads, (mtp_min_blocks(false, kDstate, -1, 1, false)))
    mtp_kernel_uniform(const Args a) {
  mtp_body<false, kDstate, -1, 1, false, false, false, false, false, true>(a);
}
template <int kDstate>
__global__ void __launch_bounds__(kThreads, (mtp_min_blocks(false, kDstate, -1, 1, false)))
    mtp_kernel_f32_uniform(const Args a) {
  mtp_body<false, kDstate, -1, 1, false, true, false, false, false, true>(a);
}
template <int kDstate>
__global__ void __launch_bounds__(kThreads, 1)
    mtp_kernel_i16_uniform(const Args a, const ScaleArgs sc) {
  mtp_body<false, kDstate, -1, 1, false, false, false, true, false, true>(a, sc);
}

// Launches the mtp_kernel_i16 of a plan (dstate 64, 128 or 256) on `nblocks` blocks with `smem`
// bytes of dynamic shared memory; the launch status (ssu_mtp_i16.cu, its own translation unit,
// linked after the other multi-token kernels).
int launch_i16(const Args &a, const ScaleArgs &sc, int dstate, unsigned nblocks, size_t smem,
               cudaStream_t st);

// Launches the mtp_kernel_bf16 of a plan (dstate 64, 128 or 256; rows per group 1, 2 or 4; the
// small-grid form) on `nblocks` blocks with `smem` bytes of dynamic shared memory; the launch
// status (ssu_mtp_bf16.cu: its own translation unit, linked after ssu_mtp.cu's kernels, so
// that theirs keep their shared-memory layout in the device link).
int launch_hot_bf16(const Args &a, int dstate, int rows_per_group, bool small, unsigned nblocks,
                    size_t smem, cudaStream_t st);

// Launches the mtp_kernel_f16in (an F16 state, `rounds` 0, 5 or 10) or, with `bf16_state`, the
// mtp_kernel_bf16_f16in (no SR) of a plan, as launch_hot_bf16 (ssu_with_f16_inputs.cu). Defined
// only in a build with MAMBA_SSU_F16_INPUT_KERNELS (launch.h: kF16InputKernels), and called only
// there.
int launch_hot_f16_inputs(const Args &a, bool bf16_state, int dstate, int rounds,
                          int rows_per_group, bool small, unsigned nblocks, size_t smem,
                          cudaStream_t st);

// Launches the mtp_kernel_i16_hot of a plan (as launch_hot_bf16; ssu_mtp_i16.cu).
int launch_hot_i16(const Args &a, const ScaleArgs &sc, int dstate, int rows_per_group, bool small,
                   unsigned nblocks, size_t smem, cudaStream_t st);

// Launches the run-time mtp_kernel at an uneven dstate (96, 160, 192 or 224, and an fp32 state's
// other uneven dstates; above 256 the long-row kernel, mtp_kernel<false, kMtpLongRows, ...>; an
// fp32 state's when `f32`, else a 2-byte one's) on `nblocks` blocks with `smem` bytes of dynamic
// shared memory (mtp_smem_bytes over mtp_tile(dstate); the long-row kernel's may pass 48 KiB:
// allow_long_smem); the launch status (ssu_uneven.cu, its own translation unit).
int launch_uneven(const Args &a, int dstate, bool f32, unsigned nblocks, size_t smem,
                  cudaStream_t st);

// Launches the run-time mtp_kernel_i16 at an uneven dstate of a 2-byte state (96, 160, 192 or
// 224; above 256 launch_long_i16's), as launch_uneven (ssu_uneven.cu).
int launch_uneven_i16(const Args &a, const ScaleArgs &sc, int dstate, unsigned nblocks,
                      size_t smem, cudaStream_t st);

// Launches the long-row kernel of an int16 state (every dstate above 256, the row's length at
// run time: mtp_kernel_i16<kMtpLongRows>, or with `uniform` mtp_kernel_i16_uniform<kMtpLongRows>)
// with allow_long_smem, as launch_uneven (ssu_with_very_long_i16_rows.cu).
int launch_long_i16(const Args &a, const ScaleArgs &sc, bool uniform, unsigned nblocks,
                    size_t smem, cudaStream_t st);

// Launches the run-time kernel with the uniform pair update for a.state_dtype (F16 or BF16:
// mtp_kernel_uniform, F32: mtp_kernel_f32_uniform, I16: mtp_kernel_i16_uniform with `sc`) at
// `dstate` (every dstate the check passes for that state; above 256 the long-row kernels,
// kMtpLongRows) on `nblocks` blocks with `smem` bytes of dynamic shared memory, as the other
// run-time launchers; the launch status (ssu_with_uniform_pairs.cu, its own translation unit,
// linked after every other kernel unit).
int launch_uniform(const Args &a, const ScaleArgs &sc, int dstate, unsigned nblocks, size_t smem,
                   cudaStream_t st);

// Static shared memory the hot int16 kernels add to every multi-token kernel's (s_sct: a
// pointer per token), which residency and the per-block limit count.
constexpr int64_t kI16HotStaticSmemBytes = kMaxTokens * sizeof(float *);

// Static shared memory of a block (mtp_body: the tokens' targets, output rows, dt' and dA, and
// the fused seed; 392 bytes), rounded up to the dynamic buffer's 16-byte alignment (the dynamic
// part starts there: 400 bytes, what the linked kernels report beside the 1 KiB the GPU
// reserves): what residency on a device and the per-block limit count beside the dynamic part.
constexpr int64_t kStaticSmemBytes =
    (2 * kMaxTokens * sizeof(char *) + 2 * kMaxTokens * sizeof(float) + sizeof(uint64_t) + 15) /
    16 * 16;

// A block's shared memory (static and dynamic) without an opt-in: a launch past it needs the
// kernel's cudaFuncAttributeMaxDynamicSharedMemorySize raised.
constexpr int64_t kSmemWithoutOptIn = 48 * 1024;

// Lets a long-row kernel (kMtpLongRows) launch with `smem` bytes of dynamic shared memory where
// its block passes kSmemWithoutOptIn (B and C of every token over the 512-column tile: 4 KiB a
// token; the plan (ssu_mtp.cu) has checked the device's opt-in limit): sets the kernel's
// dynamic limit to the most the current device allows (its opt-in limit less the kernel's
// static shared memory), the same value at every such launch, so that concurrent launches of
// other sizes never lower it below what one of them needs. A block within the limit sets
// nothing. The status of the CUDA calls (a typed error, never a failed launch).
template <class Kernel>
int allow_long_smem(Kernel *kernel, size_t smem) {
  if (static_cast<int64_t>(smem) + kStaticSmemBytes <= kSmemWithoutOptIn) return MAMBA_SSU_SUCCESS;
  int dev = 0, optin = 0;
  if (int s = check_cuda(cudaGetDevice(&dev), "cudaGetDevice")) return s;
  if (int s = check_cuda(
          cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
          "MaxSharedMemoryPerBlockOptin"))
    return s;
  cudaFuncAttributes fa{};
  if (int s = check_cuda(cudaFuncGetAttributes(&fa, kernel), "cudaFuncGetAttributes")) return s;
  return check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         optin - static_cast<int>(fa.sharedSizeBytes)),
                    "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}

}  // namespace mtp
}  // namespace mamba_ssu
