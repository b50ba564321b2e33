// ssu.cu — host side of the selective-state-update kernel: validation,
// algorithm resolution and dispatch. The device code is ssu.cuh (Args, the configs, the body
// and the kernel template, built on fp32_ops.cuh, sr.cuh, philox_words.cuh and loads.cuh),
// instantiated here by the launches.
//
// Dispatch: the hot kernels (HotConfig) serve fp16 state, bf16 x/z/B/C/out,
// bf16 dt/D/dt_bias, dim 64, dstate 128 and 0, 5 or 10 Philox rounds: per (layout,
// rounds), with and without z, in 4-row chunks (a small- and a large-grid form of those
// without SR and with 10 rounds), and for small grids in 1-row (SR) or 2-row chunks
// (small_grid_rows); 38 kernels. The same 38 with the head dim read at run time
// (HotDimConfig) serve every other multiple of 16 up to 256 (hot_dim), their warps' rows a
// divisor of it (snap_rows_per_warp). At dstate 64 and 256 the same kernels over rows of that
// many columns (HotDsConfig, head dim at run time; one form per grid size: 30 kernels each)
// serve the same head dims. A bf16, fp32 or int16 state without SR (otherwise as above) runs the
// same kernels' code with the state converted from and to bf16, in fp32 in FlashInfer's lane
// columns for 4-byte elements (ssu_stp_states.cu: Bf16State and F32State over each family, 40
// kernels each), or int16 dequantised with and quantised into its decode scales
// (ssu_stp_states_i16.cu: I16State, 40 kernels; other int16 calls DynI16Config). In a build with
// MAMBA_SSU_F16_INPUT_KERNELS, fp16 inputs and weights run the same families with fp16 input
// conversions (ssu_with_f16_inputs.cu: F16Inputs; over an fp16 state every one of the four
// families' 136 kernels, over a bf16 or an fp32 state their 40 each without SR). The large-grid
// 10-round kernels' grids at dstate 128 are tapered (their last wave of blocks in quarter-head
// warps, see Tuning::kTaperShift). Everything else that passes the checks runs the generic
// kernel (DynConfig), and so does every SR call under FlashInfer 0.7.4's conversion (sr_rule
// MAMBA_SSU_SR_V074; the hot kernels are 0.7.2's).
// Index dtype, the other optional tensors and flags are run time values in both.
#include <algorithm>
#include <limits>

#include "checks.h"
#include "common.cuh"
#include "launch.h"
#include "ssu.cuh"
#include "ssu_hot_launch.cuh"
#include "tuning.h"

namespace mamba_ssu {
namespace {

using ssu::Args;
using ssu::DynConfig;
using ssu::HotConfig;
using ssu::hot::launch;
using ssu::hot::launch_hot_shape;
using tuning::Tuning;

// Static shared memory of a single-token block, an upper bound (the Philox key schedule of 4
// warps and the fused seed; ssu.cuh): what residency on a device counts per block.
constexpr int64_t kStaticSmemBytes = 512;

// Fewest rows a block can hold (generic kernel, 4 warps x 2 rows): bounds the
// grid size in the checks, whatever rows per warp the launcher picks.
constexpr int64_t kMinRowsPerBlock = ssu::kWarpsPerBlock * DynConfig::kRowsPerChunk;
// The uneven dstates, simple and vertical: from this many bytes of state the kernel at 6 blocks
// per SM (DynUnevenWideConfig), below it DynUnevenConfig's 4 (measured at dstate 96: faster at
// 48 MiB, slower at 12; not measured at 160, 192 and 224).
constexpr int64_t kUnevenWideStateBytes = int64_t(48) << 20;
// Largest byte extent of any tensor: keeps every 64-bit offset far from overflow.
constexpr __int128 kMaxExtentBytes = static_cast<__int128>(1) << 60;

// A (batch, rows...) tensor with the given batch stride and inner extent must
// stay below kMaxExtentBytes.
bool extent_ok(int64_t batch, int64_t stride, int64_t inner, int bytes) {
  const __int128 e = (static_cast<__int128>(batch) - 1) * stride + inner;
  return e * bytes <= kMaxExtentBytes;
}



}  // namespace

// The parameter block's own rules and the seed's (launch.h).
int ssu_check(const mamba_ssu_params *p, const mamba_ssu_seed &seed, const SeedNames &names,
              const StateScale *scale) {
  if (p == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "params: null pointer");
  int s;

  // Sizes. batch == 0 is rejected: FlashInfer never sees an empty batch, and
  // an empty launch is not a valid CUDA launch.
  if (p->batch < 1) return invalid("batch: expected >= 1, got %lld", ll(p->batch));
  if (p->nheads < 1) return invalid("nheads: expected >= 1, got %lld", ll(p->nheads));
  if (p->dim < 1 || p->dim > (int64_t{1} << 30))
    return invalid("dim: expected 1..=1073741824, got %lld", ll(p->dim));
  if ((s = check_vertical_dstate(p->dstate, p->state_dtype,
                                 p->algorithm == MAMBA_SSU_ALGO_VERTICAL)))
    return s;
  if ((s = check_dstate(p->dstate, p->state_dtype))) return s;
  if (p->ngroups < 1 || p->nheads % p->ngroups != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "ngroups: expected a divisor of nheads (%lld), got %lld", ll(p->nheads),
                ll(p->ngroups));
  if (p->state_cache_size < 1)
    return invalid("state_cache_size: expected >= 1, got %lld", ll(p->state_cache_size));
  // Without read indices batch entry b reads slot b (the Rust API's rule as well).
  if (p->state_batch_indices == nullptr && p->batch > p->state_cache_size)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "state_cache_size: without state_batch_indices batch entry b uses slot b: "
                "expected >= batch (%lld), got %lld",
                ll(p->batch), ll(p->state_cache_size));
  {
    const __int128 blocks = static_cast<__int128>(p->batch) * p->nheads *
                            ((p->dim + kMinRowsPerBlock - 1) / kMinRowsPerBlock);
    if (blocks > std::numeric_limits<int32_t>::max())
      return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                  "batch: batch * nheads * ceil(dim / %lld) expected <= %d (grid size), got "
                  "%lld x %lld x %lld",
                  ll(kMinRowsPerBlock), std::numeric_limits<int32_t>::max(), ll(p->batch),
                  ll(p->nheads), ll((p->dim + kMinRowsPerBlock - 1) / kMinRowsPerBlock));
  }

  // Enumerations. An I16 state comes with its scales (StateScale, mamba_ssu_args only).
  if (!is_float_dtype(p->state_dtype) && !(scale != nullptr && p->state_dtype == MAMBA_SSU_I16))
    return invalid("state_dtype: expected F32, F16 or BF16, got %lld", ll(p->state_dtype));
  if (!is_float_dtype(p->input_dtype))
    return invalid("input_dtype: expected F32, F16 or BF16, got %lld", ll(p->input_dtype));
  if (!is_float_dtype(p->weight_dtype))
    return invalid("weight_dtype: expected F32, F16 or BF16, got %lld", ll(p->weight_dtype));
  const bool has_index = p->state_batch_indices != nullptr || p->dst_state_batch_indices != nullptr;
  if (has_index && p->index_dtype != MAMBA_SSU_I32 && p->index_dtype != MAMBA_SSU_I64)
    return invalid("index_dtype: expected I32 or I64, got %lld", ll(p->index_dtype));
  if (p->algorithm != MAMBA_SSU_ALGO_AUTO && p->algorithm != MAMBA_SSU_ALGO_SIMPLE &&
      p->algorithm != MAMBA_SSU_ALGO_VERTICAL && p->algorithm != MAMBA_SSU_ALGO_HORIZONTAL)
    return invalid(
        "algorithm: expected AUTO (0), SIMPLE (1), VERTICAL (2) or HORIZONTAL (3), got %lld",
        ll(p->algorithm));
  // FlashInfer's horizontal kernel gives each row 2 threads of its (dim / 64) * 4 consumer
  // warps and loads a stage of all dim rows as one TMA box (at most 256 rows): 0.7.4's launcher
  // refuses other head dims (a RuntimeError), 0.7.2's runs them out of bounds.
  if (p->algorithm == MAMBA_SSU_ALGO_HORIZONTAL && !hz_dim_ok(p->dim))
    return invalid(
        "algorithm: HORIZONTAL needs a head dim that is a multiple of 64 and at most 256 "
        "(FlashInfer's horizontal kernel), got dim %lld",
        ll(p->dim));

  // Pointers and alignment.
  const int sb = float_bytes(p->state_dtype);
  const int ib = float_bytes(p->input_dtype);
  const int wb = float_bytes(p->weight_dtype);
  if ((s = check_pointer(p->state, "state", 16))) return s;
  if ((s = check_pointer(p->x, "x", 16))) return s;
  if ((s = check_pointer(p->dt, "dt", wb))) return s;
  if ((s = check_pointer(p->A, "A", 4))) return s;
  if ((s = check_pointer(p->B, "B", 16))) return s;
  if ((s = check_pointer(p->C, "C", 16))) return s;
  if ((s = check_pointer(p->out, "out", 16))) return s;
  if (p->z != nullptr && (s = check_pointer(p->z, "z", 16))) return s;
  if (p->D != nullptr && (s = check_pointer(p->D, "D", wb))) return s;
  if (p->dt_bias != nullptr && (s = check_pointer(p->dt_bias, "dt_bias", wb))) return s;
  if ((s = check_seed(seed, p->state_dtype, names))) return s;
  // FlashInfer's horizontal kernel has no int16 path (with scales its launcher refuses the call,
  // which mamba_ssu_check rejects first).
  if (p->state_dtype == MAMBA_SSU_I16 && p->algorithm == MAMBA_SSU_ALGO_HORIZONTAL)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                "algorithm: HORIZONTAL with an I16 state is not served (SIMPLE, VERTICAL or AUTO)");
  if ((s = check_i16_vertical(p->dstate, p->state_dtype,
                              p->algorithm == MAMBA_SSU_ALGO_VERTICAL)))
    return s;
  if ((s = check_long_dstate(p->dstate, p->state_dtype, false))) return s;
  // The decode scales (slots, nheads, dim) of an I16 state.
  const bool scaled = scale != nullptr && scale->data != nullptr;
  if (scaled && (s = check_state_scale(*scale, p->nheads, p->dim, p->state_cache_size))) return s;
  if ((s = check_index(p->state_batch_indices, "state_batch_indices", p->index_dtype,
                       p->state_batch_indices_stride, "state_batch_indices_stride")))
    return s;
  if ((s = check_index(p->dst_state_batch_indices, "dst_state_batch_indices", p->index_dtype,
                       p->dst_state_batch_indices_stride, "dst_state_batch_indices_stride")))
    return s;

  // Strides (elements) and extents.
  const int64_t head_block = p->nheads * p->dim * p->dstate;  // < 2^69 / 2^31: no overflow
  const int64_t row = p->nheads * p->dim;
  const int64_t bc_row = p->ngroups * p->dstate;
  if ((s = check_stride16(p->state_stride_batch, "state_stride_batch", sb, head_block))) return s;
  if ((s = check_stride16(p->x_stride_batch, "x_stride_batch", ib, 0))) return s;
  if ((s = check_stride16(p->B_stride_batch, "B_stride_batch", ib, 0))) return s;
  if ((s = check_stride16(p->C_stride_batch, "C_stride_batch", ib, 0))) return s;
  if (p->z != nullptr && (s = check_stride16(p->z_stride_batch, "z_stride_batch", ib, 0))) return s;
  // Output rows of different batch entries must not overlap.
  if ((s = check_stride16(p->out_stride_batch, "out_stride_batch", ib, p->batch > 1 ? row : 0)))
    return s;
  if (p->dt_stride_batch < 0)
    return invalid("dt_stride_batch: expected >= 0, got %lld", ll(p->dt_stride_batch));
  struct Extent {
    const char *name;
    bool present;
    int64_t n, stride, inner;
    int bytes;
  };
  const Extent extents[] = {
      {"state", true, p->state_cache_size, p->state_stride_batch, head_block, sb},
      {"x", true, p->batch, p->x_stride_batch, row, ib},
      {"out", true, p->batch, p->out_stride_batch, row, ib},
      {"z", p->z != nullptr, p->batch, p->z_stride_batch, row, ib},
      {"B", true, p->batch, p->B_stride_batch, bc_row, ib},
      {"C", true, p->batch, p->C_stride_batch, bc_row, ib},
      {"dt", true, p->batch, p->dt_stride_batch, p->nheads, wb},
      {"state_batch_indices", p->state_batch_indices != nullptr, p->batch,
       p->state_batch_indices_stride, 1, 8},
      {"dst_state_batch_indices", p->dst_state_batch_indices != nullptr, p->batch,
       p->dst_state_batch_indices_stride, 1, 8},
  };
  for (const Extent &e : extents) {
    if (e.present && !extent_ok(e.n, e.stride, e.inner, e.bytes))
      return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "%s: extent above 2^60 bytes", e.name);
  }
  if (scaled && !extent_ok(p->state_cache_size, scale->slot_stride, row, 4))
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "state_scale: extent above 2^60 bytes");
  return MAMBA_SSU_SUCCESS;
}

namespace {


// FlashInfer's rule (both for AUTO and for its tiled simple kernel).
bool below_switch(int64_t batch, int64_t nheads, int num_sms) {
  return static_cast<__int128>(batch) * nheads < 2 * static_cast<__int128>(num_sms);
}

// Rows per warp: grow from one chunk while at least warps_per_sm warps per SM (after doubling)
// remain, up to Tuning::kMaxRowsPerWarp, and above it (max_rpw: the SR kernels' longer warps)
// while Tuning::kWideRpwWarpsPerSm remain (tuning.h).
// Thresholds in warps per SM are tuning.h's for the H200, scaled to d's warp slots
// (scaled_warps).
int pick_rows_per_warp(int64_t rows, const mamba_ssu_device_props &d, int rows_per_chunk,
                       int max_rpw, int64_t warps_per_sm) {
  int rpw = rows_per_chunk;
  while (rpw < max_rpw &&
         rows / (2 * rpw) >= scaled_warps(d, rpw < Tuning::kMaxRowsPerWarp
                                                 ? warps_per_sm
                                                 : int64_t{Tuning::kWideRpwWarpsPerSm}) *
                                 d.num_sms)
    rpw *= 2;
  return rpw;
}

// Magic number and shift for dividing numerators n < 2^31 by d (1 <= d < 2^31) on the device
// as (umulhi(n, magic) + n) >> shift: shift = ceil(log2 d), magic = 2^32 (2^shift - d) / d + 1
// (the round-up method; the sum stays below 2^32 because umulhi(n, magic) <= n < 2^31).
void make_divider(uint32_t d, uint32_t *magic, uint32_t *shift) {
  uint32_t s = 0;
  while ((uint64_t{1} << s) < d) ++s;
  *shift = s;
  *magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1);
}

// Small grids: one warp per chunk of 1 or 2 rows (a warp's serial work, its rows' math,
// reduction, SR and stores, is then a quarter or a half of a 4-row warp's), instead of 4-row
// chunks; the bounds are tuning.h's kSmall*Factor, in Tuning::kRpwWarpsPerSm warps per SM of one
// row each. Without SR the 2-row kernels take blocks of Tuning::kSmallNoSrBlockWarps warps
// (HotConfig::kBlockWarps). Returns the rows per chunk (and per warp) of the small-grid kernels,
// or 0: not a small grid.
int small_grid_rows(int64_t rows, const mamba_ssu_device_props &d, int rounds, bool simple) {
  const int64_t warps = scaled_warps(d, Tuning::kRpwWarpsPerSm) * d.num_sms;
  if (rows < Tuning::kSmall1Factor * warps) return rounds == 0 ? 2 : 1;
  if (rows < Tuning::kSmall2Factor * warps && rounds > 0 && (simple || rounds == 5)) return 2;
  if (rows < Tuning::kSmall2R10SimpleFactor * warps && rounds == 10 && simple) return 2;
  return 0;
}

// The head_dims of the hot kernels: 64 (HotConfig) and every other multiple of 16 up to 256
// (HotDimConfig, head_dim at run time; ssu.cuh's zero_page is sized for 256): a head of dim
// rows then splits into warps of 4 rows in blocks of 4 warps, or into 1- or 2-row warps in
// blocks of 4 or 8 (the small-grid kernels), without a partial chunk or block.
bool hot_dim(int64_t dim) { return dim == 64 || (dim % 16 == 0 && dim >= 16 && dim <= 256); }

// Rows per warp for the run-time head_dim kernels (HotDimConfig): the divisor of dim nearest
// to rpw (the dim-64 rule's pick; in log2, ties to the smaller) that is a multiple of the chunk
// rows and whose warps fill blocks of block_warps warps, or one block of fewer. Every chunk is
// then full and the body's warp numbering (a block's index in the head times its warps) holds.
int snap_rows_per_warp(int64_t dim, int rpw, int rows_per_chunk, int block_warps) {
  int64_t best = rows_per_chunk;  // dim % 16 == 0: 4 warps of 4 rows divide it (hot_dim)
  int64_t best_hi = 0, best_lo = 1;  // the ratio max(d, rpw) / min(d, rpw) of best, as hi / lo
  for (int64_t d = rows_per_chunk; d <= dim; d += rows_per_chunk) {
    if (dim % d != 0) continue;
    const int64_t warps = dim / d;
    if (warps % block_warps != 0 && warps > block_warps) continue;
    const int64_t hi = std::max<int64_t>(d, rpw), lo = std::min<int64_t>(d, rpw);
    if (best_hi == 0 || hi * best_lo < best_hi * lo) {
      best = d;
      best_hi = hi;
      best_lo = lo;
    }
  }
  return static_cast<int>(best);
}

// The hot kernels implement FlashInfer 0.7.2's SR conversion only: a call with SR under
// MAMBA_SSU_SR_V074 runs the generic kernel (same layouts, random words and summation forms;
// its exact SR path takes the rule). Without SR the rule changes nothing.
bool is_hot(const mamba_ssu_params *p) {
  return (p->state_dtype == MAMBA_SSU_F16 || p->philox_rounds == 0) &&
         hot_input_dtypes(p->state_dtype, p->input_dtype, p->weight_dtype) &&
         hot_dim(p->dim) &&
         (p->dstate == 64 || p->dstate == 128 || p->dstate == 256) &&
         (p->philox_rounds == 0 || p->philox_rounds == 5 || p->philox_rounds == 10) &&
         !(p->philox_rounds > 0 && p->sr_rule == MAMBA_SSU_SR_V074);
}

// The first accumulate form of FlashInfer's single-token kernel that the call's algorithm
// selects (docs/flashinfer-ssu.md, "Summation order of y"): a choice its compiler makes per
// instantiation (its build contracts multiply-adds), read from the SASS of its sm_90 kernels
// (tools/flashinfer-recorder/first_forms.py; fp16 state, 0 to 12 and 16 rounds, head dims 64,
// 80 and 128, which do not change it). Per kernel (simple, tiled simple below the auto switch,
// vertical), F1 = 1:
//   no SR: 0 1 0 at every dstate; an fp32 state at dstate 256: 0 0 1 (bf16 as fp16);
//   dstate 64: 0 1 0 with 1 or 2 rounds, 0 0 0 from 3 on;
//   dstate 128: 0 1 0 with 1 round, 0 0 1 from 2 on;
//   dstate 256, 0.7.2.post1: 0 1 1 with 1 to 3 rounds, 0 0 1 with 4 or 5, 1 1 1 from 6 on;
//   dstate 256, 0.7.4 (v074: the call's SR rule): 0 0 1 with 1 to 4 rounds, 1 1 1 from 5 on;
//   dstate 96 (both releases): 1 1 0 without SR (every state dtype), 1 1 1 with 1 round,
//   1 0 1 from 2 on;
//   dstates 160, 192 and 224: simple F1 always; vertical F0 with an fp32 state and at 192
//   without SR or with 1 round, else F1; tiled simple F0 over a range of round counts, F1
//   outside it: 0.7.2.post1 160 and 192 3 to 7, 224 none; 0.7.4 160 2 to 6, 192 2 to 5, 224 1
//   and 2;
//   an fp32 state (no SR) at the dstates only it takes: 32 and 48 0 1 0, 80 0 0 1, 144, 208 and
//   240 1 1 1, 176 1 1 0.
// With fp32 inputs over an fp16 or a bf16 state (`f32_in`; read from both releases' builds of
// cases/f32in_forms_cases.json and f32in_cases.json, head dim 64, 0 to 12 and 16 rounds) the
// same but the tiled simple kernel F1 at 160, 192 and 224 for every round count and the
// vertical one F1 at 128 and 192 with 1 round; an fp32 state with fp32 inputs: f32_input_form.
// Above dstate 256 (2-byte states at every multiple of 32 from 288 to 512 without SR and at 5
// and 10 rounds, at 288 and 512 with 1 to 7, 12 and 16 rounds, a bf16 state at 288 and 512; an
// fp32 state at every multiple of 16 from 272 to 512; read from both releases' builds of
// cases/dsbig_forms_cases.json) the simple and tiled simple kernels are F1 at every dstate and
// round count but with an fp32 state at 384, where both are F0 (both releases; the vertical
// kernel is not launched there: checks.h, check_vertical_dstate).
// Round counts above 16 are taken as 16. `f32`: the state is fp32.
bool first_form_f1(bool simple, bool below, int64_t rounds, int64_t dstate, bool f32, bool v074,
                   bool f32_in) {
  if (dstate > 256) return !(f32 && dstate == 384);  // long_dstate
  if (f32_in && !f32 && simple && below && dstate > 128 && dstate < 256) return true;
  if (f32_in && !f32 && !simple && rounds == 1 && (dstate == 128 || dstate == 192)) return true;
  if (f32 && (dstate == 32 || dstate == 48)) return simple && below;
  if (f32 && dstate == 80) return !simple;
  if (f32 && dstate == 176) return simple;
  if (f32 && (dstate == 144 || dstate == 208 || dstate == 240)) return true;
  if (dstate == 96 && rounds == 0) return simple;
  if (dstate == 96) return rounds == 1 || !(simple && below);
  if (dstate > 128 && dstate < 256 && !simple) return !f32 && !(dstate == 192 && rounds <= 1);
  if (dstate > 128 && dstate < 256 && !below) return true;
  if (dstate == 160 && v074) return rounds < 2 || rounds > 6;
  if (dstate == 192 && v074) return rounds < 2 || rounds > 5;
  if (dstate == 224 && v074) return rounds < 1 || rounds > 2;
  if (dstate == 224) return true;
  if (dstate > 128 && dstate < 256) return rounds < 3 || rounds > 7;
  if (rounds <= 1 && f32 && dstate == 256) return !simple;
  if (rounds == 0) return simple && below;
  if (dstate == 64) return simple && below && rounds <= 2;
  if (dstate == 128 && rounds <= 1) return simple && below;
  if (dstate == 128) return !simple;
  if (v074) return rounds >= 5 || !simple;
  if (rounds >= 6) return true;
  if (rounds >= 4) return !simple;
  return !simple || below;
}

// The first form of a row of the generic kernels of an fp32 state with fp32 inputs (RowForms,
// ssu.cuh; Args::first_form_f1 bits 0-1, pad rows 2-3): 0 F0, 1 F1, 2 F2 (no contraction,
// rn(rn(sel * rn(D * x)) + rn(C * s'))). Read from the SASS of FlashInfer 0.7.2.post1's and
// 0.7.4's builds of tools/flashinfer-recorder/cases/f32in_cases.json (first_forms.py; head dim 64,
// every dstate an fp32 state takes, fp32 weights, and at dstate 128 bf16 and fp16 weights; both
// releases alike): first_form_f1's forms (`f1`) but the vertical kernel's pad rows (`pad`: the
// read slot is the pad slot, which it runs from state 0 in code of its own) F1 at every dstate,
// the simple kernel F1 at dstate 48 and the tiled simple kernel F2 at dstate 32.
int f32_input_form(bool simple, bool below, int64_t dstate, bool pad, bool f1) {
  if (!simple && pad) return 1;
  if (simple && below && dstate == 32) return 2;
  if (simple && !below && dstate == 48) return 1;
  return f1 ? 1 : 0;
}

// The first forms of an int16 state's generic kernel at an uneven dstate (DynUnevenI16Config),
// read from the SASS of FlashInfer 0.7.2.post1's and 0.7.4's builds (first_forms.py,
// cases/int16_uneven_cases.json; both alike): bit 0 the form of rows whose read slot is not the
// pad slot, bit 1 of pad rows (FlashInfer's vertical kernel has a path of its own for a pad
// slot, without the quantisation). Simple and tiled simple: the fp16 state's forms without SR
// (F1) on both paths; vertical: F0, on the pad path the fp16 state's (F1 at 160 and 224, F0 at
// 96 and 192). At 512 (DynLongI16Config; cases/int16_dsbig_cases.json, both releases' builds):
// simple and tiled simple F0, not the fp16 state's F1 above 256 (vertical is refused there).
int i16_uneven_forms(bool simple, bool below, int64_t dstate) {
  if (long_dstate(dstate)) return 0;
  const int fp16 = first_form_f1(simple, below, 0, dstate, false, false, false) ? 1 : 0;
  return simple ? fp16 | (fp16 << 1) : fp16 << 1;
}

// The launch configuration of a checked problem: a pure function of the parameters and the
// device's properties (no device touched), shared by the launcher and the plan functions.
struct Plan {
  bool below, simple, f1, hot;
  bool hot_rt_dim;  // a hot kernel with head_dim at run time (HotDimConfig)
  int64_t rows;
  int small_rows, rows_per_chunk, rpw, warps_per_block;
  int64_t blocks_per_head, blocks;
  uint32_t taper_start, taper_shift;
  unsigned nblocks;
};

int plan_launch(const mamba_ssu_params &p, const mamba_ssu_device_props &d, Plan *out) {
  if (int s = check_props(&d)) return s;
  const int num_sms = d.num_sms;
  const bool below = below_switch(p.batch, p.nheads, num_sms);
  const bool simple =
      p.algorithm == MAMBA_SSU_ALGO_SIMPLE ||
      (p.algorithm == MAMBA_SSU_ALGO_AUTO &&
       auto_algorithm(p.batch, p.nheads, p.dim, p.state_dtype, d) == MAMBA_SSU_ALGO_SIMPLE);
  // AUTO resolved to VERTICAL (the explicit algorithm is refused by ssu_check).
  if (int s = check_i16_vertical(p.dstate, p.state_dtype, !simple)) return s;
  // AUTO resolved to VERTICAL above dstate 256: FlashInfer's launcher refuses it there
  // (check_vertical_dstate refuses the explicit algorithm).
  if (int s = check_vertical_dstate(p.dstate, p.state_dtype, !simple)) return s;
  // First accumulate form of FlashInfer's build (first_form_f1).
  const bool f1 =
      first_form_f1(simple, below, p.philox_rounds, p.dstate, p.state_dtype == MAMBA_SSU_F32,
                    p.philox_rounds > 0 && p.sr_rule == MAMBA_SSU_SR_V074,
                    p.input_dtype == MAMBA_SSU_F32);

  const bool hot = is_hot(&p);
  const int64_t rows = p.batch * p.nheads * p.dim;
  const int small_rows = hot ? small_grid_rows(rows, d, p.philox_rounds, simple) : 0;
  const bool small = small_rows > 0;
  const int rows_per_chunk = !hot ? DynConfig::kRowsPerChunk
                             : small ? small_rows
                                     : HotConfig<true, 0>::kRowsPerChunk;
  // The SR hot kernels on large grids may give a warp half a head or a whole one (32 or 64 rows):
  // the per-(b, h) work of a warp (indices, dt', dA, B, C, the Philox key) is then spread over
  // more rows. A block still serves one (b, h) (so that everything derived from the block
  // index stays in uniform registers): it has 2 or 1 warps instead of 4.
  const int max_rpw =
      hot && !small && p.philox_rounds > 0 ? Tuning::kSrMaxRowsPerWarp : Tuning::kMaxRowsPerWarp;
  // The 10-round vertical kernel (twice the Philox calls per element of the simple one) keeps
  // more, shorter warps on small grids (Tuning::kR10VerticalRpwWarpsPerSm).
  const int64_t rpw_warps = hot && !simple && p.philox_rounds == 10
                                ? int64_t{Tuning::kR10VerticalRpwWarpsPerSm}
                                : int64_t{Tuning::kRpwWarpsPerSm};
  int rpw = small ? small_rows : pick_rows_per_warp(rows, d, rows_per_chunk, max_rpw, rpw_warps);
  // 64 rows per warp (a whole head, one-warp blocks) for the 10-round SR kernels on grids of
  // at least Tuning::kR10WholeHeadWarpsPerSm warps per SM at 64 rows.
  if (hot && !small && p.philox_rounds == 10 && rpw == 32 && p.dim % 64 == 0 &&
      rows / 64 >= scaled_warps(d, Tuning::kR10WholeHeadWarpsPerSm) * num_sms)
    rpw = 64;
  // Wave quantisation (hot kernels without SR): a grid just over one wave of resident blocks (at
  // most Tuning::kWaveSplitPct % of a wave of the blocks resident on d) runs a second, partly
  // empty wave of full-length blocks; halving the rows per warp spreads that tail.
  if (hot && !small && p.philox_rounds == 0) {
    const int64_t wave =
        int64_t{resident_blocks(d, HotConfig<true, 0>::kMinBlocksPerSM, ssu::kThreadsPerBlock,
                                kStaticSmemBytes)} *
        num_sms;
    const int64_t heads = p.batch * p.nheads;
    auto grid = [&](int r) { return heads * ((p.dim + 4 * r - 1) / (4 * r)); };
    while (rpw > rows_per_chunk && grid(rpw) > wave &&
           100 * grid(rpw) <= int64_t{Tuning::kWaveSplitPct} * wave)
      rpw /= 2;
  }
  const bool hot_rt_dim = hot && p.dim != 64;
  if (hot_rt_dim && !small)
    rpw = snap_rows_per_warp(p.dim, rpw, rows_per_chunk, ssu::kWarpsPerBlock);
  // The 2-row kernels without SR take HotConfig<*, 0, 2>::kBlockWarps warps per block (dim 64 is
  // a multiple of 2 rows times it).
  const int warps_per_block =
      small_rows == 2 && p.philox_rounds == 0 ? HotConfig<true, 0, 2>::kBlockWarps
      // A head of fewer rows than one warp takes (dim < rpw): one warp, its rows past dim
      // skipped by the run-time kernel's partial chunks (the hot kernels have dim 64).
      : rpw * ssu::kWarpsPerBlock > p.dim     ? std::max(1, static_cast<int>(p.dim / rpw))
                                              : ssu::kWarpsPerBlock;
  const int64_t rows_per_block = int64_t{warps_per_block} * rpw;
  const int64_t blocks_per_head = (p.dim + rows_per_block - 1) / rows_per_block;
  // <= INT32_MAX: check() bounds it for the fewest rows per block of the other configs, and a
  // small grid (1 or 2 rows per warp, 4, 8 or 16 per block) has fewer than
  // Tuning::kSmall2R10SimpleFactor * Tuning::kRpwWarpsPerSm * num_sms rows.
  int64_t blocks = p.batch * p.nheads * blocks_per_head;
  // A tapered grid (HotConfig::kTaper: the large-grid 4-row 10-round forms, grids of one block
  // per head): the last heads in 2^Tuning::kTaperShift blocks each, whose warps take that
  // fraction of the rows, so that the grid's last wave drains sooner (whole-head warps keep
  // their short per-row prologue cost everywhere else). The tail is Tuning::kTaperPct % of one
  // wave of resident blocks.
  static_assert(Tuning::kTaperShift > 0 && Tuning::kTaperPct > 0, "tuning.h: the taper");
  uint32_t taper_start = UINT32_MAX, taper_shift = 0;
  const bool taper_kernel = p.philox_rounds == 10 && rows >= Tuning::kLargeGridRows;
  if (hot && !small && taper_kernel && blocks_per_head == 1 && p.dstate == 128 &&
      (rpw >> Tuning::kTaperShift) >= rows_per_chunk &&
      (rpw >> Tuning::kTaperShift) % rows_per_chunk == 0 &&
      (rpw >> Tuning::kTaperShift) << Tuning::kTaperShift == rpw) {
    const int64_t heads = p.batch * p.nheads;
    const int64_t parts = int64_t{1} << Tuning::kTaperShift;
    const int64_t resident =
        resident_blocks(d, HotConfig<true, 10, 4, false, 1>::kMinBlocksPerSM,
                        ssu::kThreadsPerBlock, kStaticSmemBytes);
    const int64_t wave = resident * ssu::kWarpsPerBlock / warps_per_block * num_sms;
    const int64_t tail = std::min(heads / 2, int64_t{Tuning::kTaperPct} * wave / 100 / parts);
    if (tail > 0 && heads - tail + tail * parts < int64_t{INT32_MAX}) {
      taper_start = static_cast<uint32_t>(heads - tail);
      taper_shift = Tuning::kTaperShift;
      blocks = heads - tail + tail * parts;
    }
  }

  // One extra block (block 0, see ssu_body) stores a fused chain's next seed.
  if (p.seed_next != nullptr && blocks + 1 > INT32_MAX)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "seed_next: the grid has no room for its block");
  const int64_t nblocks = blocks + (p.seed_next != nullptr ? 1 : 0);
  // Invariants of a valid launch (a violation is a planning bug: reported, never launched).
  if (rpw < 1 || warps_per_block < 1 || warps_per_block > 32 || blocks_per_head < 1 ||
      int64_t{warps_per_block} * rpw * blocks_per_head < p.dim || nblocks < 1 ||
      nblocks > INT32_MAX)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                "launch plan: no valid grid (rows per warp %d, warps per block %d, blocks per "
                "head %lld, blocks %lld)",
                rpw, warps_per_block, ll(blocks_per_head), ll(nblocks));
  *out = Plan{below,        simple,          f1,        hot,         hot_rt_dim, rows,
              small_rows,   rows_per_chunk,  rpw,       warps_per_block,
              blocks_per_head, blocks,       taper_start, taper_shift,
              static_cast<unsigned>(nblocks)};
  return MAMBA_SSU_SUCCESS;
}

}  // namespace

// The head dims FlashInfer's vertical kernel takes (0.7.4's launcher check: a multiple of 16,
// at least 48).
bool vertical_dim_ok(int64_t dim) { return dim % 16 == 0 && dim >= 48; }

int32_t auto_algorithm(int64_t batch, int64_t nheads, int64_t dim, int32_t state_dtype,
                       const mamba_ssu_device_props &d) {
  // FlashInfer's kernels for GPUs below sm_90 have the simple layout only.
  if (d.cc_major < 9) return MAMBA_SSU_ALGO_SIMPLE;
  if (below_switch(batch, nheads, d.num_sms)) return MAMBA_SSU_ALGO_SIMPLE;
  // A head dim FlashInfer's vertical kernel does not take (not a multiple of 16, or below 48):
  // 0.7.4's rule runs simple (0.7.2's module builds neither such a dim nor any dim that is not
  // a multiple of 64: docs/flashinfer-ssu.md, "Shapes FlashInfer takes on sm_90").
  if (!vertical_dim_ok(dim)) return MAMBA_SSU_ALGO_SIMPLE;
  if (d.cc_major < 10) return MAMBA_SSU_ALGO_VERTICAL;
  // FlashInfer's module for sm_100 and newer: vertical for an fp32 state (it measured faster
  // there), horizontal for an fp16 or bf16 one. For a head dim its horizontal kernel does not
  // take, 0.7.4 falls back to vertical (0.7.2 runs the horizontal kernel out of its bounds).
  // An int16 state: vertical (FlashInfer's AUTO sends a block-scaled state there, as its
  // horizontal kernel refuses it).
  if (state_dtype == MAMBA_SSU_F32 || state_dtype == MAMBA_SSU_I16 || !hz_dim_ok(dim))
    return MAMBA_SSU_ALGO_VERTICAL;
  return MAMBA_SSU_ALGO_HORIZONTAL;
}

namespace {
// The algorithm a checked block runs on device d: its own, or AUTO's resolution.
int32_t resolved_algorithm(const mamba_ssu_params &p, const mamba_ssu_device_props &d) {
  return p.algorithm == MAMBA_SSU_ALGO_AUTO
             ? auto_algorithm(p.batch, p.nheads, p.dim, p.state_dtype, d)
             : p.algorithm;
}

// Args::l2_prefetch: whether the hot kernels' bulk L2 prefetch (HotConfig::kL2Prefetch: no SR)
// is issued. Always, but for an fp32 state (F32State, the choice at run time) with rows wider
// than the 256 bytes the prefetch was tuned for (dstates 128 and 256) whose call moves more than
// Tuning::kF32PrefetchMaxStateBytes of state. Read by no other kernel.
bool l2_prefetch(const mamba_ssu_params &p) {
  const int esize = float_bytes(p.state_dtype);
  if (p.state_dtype != MAMBA_SSU_F32 || p.dstate * esize <= 256) return true;
  const double bytes = static_cast<double>(esize) * static_cast<double>(p.batch) *
                       static_cast<double>(p.nheads) * static_cast<double>(p.dim) *
                       static_cast<double>(p.dstate);
  return bytes <= static_cast<double>(Tuning::kF32PrefetchMaxStateBytes);
}
}  // namespace

int ssu_plan(const mamba_ssu_params &p, const mamba_ssu_device_props &d,
             mamba_ssu_launch_plan *out) {
  const int sms = d.num_sms;
  if (int s = check_props(&d)) return s;
  if (resolved_algorithm(p, d) == MAMBA_SSU_ALGO_HORIZONTAL) return hz_plan(p, d, out);
  Plan plan;
  if (int s = plan_launch(p, d, &plan)) return s;
  out->grid_blocks = plan.nblocks;
  out->threads_per_block = 32 * plan.warps_per_block;
  out->rows_per_warp = plan.rpw;
  out->warps_per_block = plan.warps_per_block;
  out->blocks_per_head = plan.blocks_per_head;
  out->algorithm = plan.simple ? MAMBA_SSU_ALGO_SIMPLE : MAMBA_SSU_ALGO_VERTICAL;
  out->compiled_kernel = plan.hot ? 1 : 0;
  out->num_sms = sms;
  return MAMBA_SSU_SUCCESS;
}

int ssu_launch(mamba_ssu_stream_t stream, const mamba_ssu_params &p, const mamba_ssu_seed &seed,
               const StateScale &scale) {
  mamba_ssu_device_props d;
  if (int s = launch_props(p.num_sms, &d)) return s;
  if (resolved_algorithm(p, d) == MAMBA_SSU_ALGO_HORIZONTAL) return hz_launch(stream, p, seed, d);
  Plan plan;
  if (int s = plan_launch(p, d, &plan)) return s;
  const bool below = plan.below, simple = plan.simple, f1 = plan.f1, hot = plan.hot;
  const int64_t rows = plan.rows;
  const int small_rows = plan.small_rows, rpw = plan.rpw, warps_per_block = plan.warps_per_block;
  const int64_t blocks_per_head = plan.blocks_per_head;
  const uint32_t taper_start = plan.taper_start, taper_shift = plan.taper_shift;

  Args a{};
  a.x = p.x;
  a.dt = p.dt;
  a.dt_bias = p.dt_bias;
  a.A = p.A;
  a.B = p.B;
  a.C = p.C;
  a.D = p.D;
  a.z = p.z;
  a.out = p.out;
  a.state = p.state;
  a.state_batch_indices = p.state_batch_indices;
  a.dst_state_batch_indices = p.dst_state_batch_indices;
  lower_seed(seed, &a);
  a.state_stride_batch = p.state_stride_batch;
  a.x_stride_batch = p.x_stride_batch;
  a.dt_stride_batch = p.dt_stride_batch;
  a.B_stride_batch = p.B_stride_batch;
  a.C_stride_batch = p.C_stride_batch;
  a.z_stride_batch = p.z_stride_batch;
  a.out_stride_batch = p.out_stride_batch;
  a.state_batch_indices_stride = p.state_batch_indices_stride;
  a.dst_state_batch_indices_stride = p.dst_state_batch_indices_stride;
  a.pad_slot_id = p.pad_slot_id;
  a.state_cache_size = p.state_cache_size;
  a.nheads = static_cast<uint32_t>(p.nheads);
  a.heads_per_group = static_cast<uint32_t>(p.nheads / p.ngroups);
  a.blocks_per_head = static_cast<uint32_t>(blocks_per_head);
  make_divider(a.blocks_per_head, &a.bph_magic, &a.bph_shift);
  make_divider(a.nheads, &a.nheads_magic, &a.nheads_shift);
  a.rows_per_warp = rpw;
  a.taper_start = taper_start;
  a.taper_shift = taper_shift;
  a.dim = static_cast<int32_t>(p.dim);
  a.dstate = static_cast<int32_t>(p.dstate);
  a.simple = simple ? 1 : 0;
  a.first_form_f1 = f1 ? 1 : 0;
  if (p.state_dtype == MAMBA_SSU_I16 && !hot && uneven_dstate(p.dstate))
    a.first_form_f1 = i16_uneven_forms(simple, below, p.dstate);
  const bool f32_inputs =
      !hot && p.state_dtype == MAMBA_SSU_F32 && p.input_dtype == MAMBA_SSU_F32;
  if (f32_inputs)
    a.first_form_f1 = f32_input_form(simple, below, p.dstate, false, f1) |
                      f32_input_form(simple, below, p.dstate, true, f1) << 2;
  a.state_dtype = p.state_dtype;
  a.input_dtype = p.input_dtype;
  a.weight_dtype = p.weight_dtype;
  a.index_dtype = p.index_dtype;
  a.dt_softplus = p.dt_softplus != 0;
  a.update_state = p.update_state != 0;
  // Fused seeds once per block on large grids (perf-notes: Tried (2026-11-30)).
  a.block_seed = !below ? 1 : 0;
  a.l2_prefetch = l2_prefetch(p) ? 1 : 0;


  const auto st = reinterpret_cast<cudaStream_t>(stream);
  const unsigned nblocks = plan.nblocks;
  const int wpb = warps_per_block;
  const ssu::ScaleArgs sc{const_cast<float *>(scale.data), scale.slot_stride};
  if (p.state_dtype == MAMBA_SSU_I16 && !hot && uneven_dstate(p.dstate))
    return ssu::launch_uneven_i16(a, sc, nblocks, wpb, st);
  if (p.state_dtype == MAMBA_SSU_I16 && !hot) {
    ssu::ssu_kernel_scaled<ssu::DynI16Config><<<nblocks, 32 * wpb, 0, st>>>(a, sc);
    return check_launch("selective_state_update launch");
  }
  // The calls that read >= 48 MiB of state at an uneven dstate take the kernel at 6 blocks per
  // SM (DynUnevenWideConfig; same-run A/B: docs/perf-notes.md, "dstate 96: where the run-time
  // kernel's time goes").
  const auto wide = [&p] {
    return p.batch * p.nheads * p.dim * p.dstate * float_bytes(p.state_dtype) >=
           kUnevenWideStateBytes;
  };
  // Above 256 the long-row kernels (with fp32 inputs over an fp32 state its RowForms config).
  if (long_dstate(p.dstate)) return ssu::launch_long(a, nblocks, wpb, f32_inputs, st);
  if (f32_inputs)
    return ssu::launch_f32_inputs(a, nblocks, wpb, uneven_dstate(p.dstate), wide(), st);
  if (!hot && uneven_dstate(p.dstate)) return ssu::launch_uneven(a, nblocks, wpb, wide(), st);
  if (!hot) return launch<DynConfig>(a, nblocks, wpb, st);
  const ssu::StpStateFamily family = p.dstate == 64    ? ssu::StpStateFamily::kDs64
                                     : p.dstate == 256 ? ssu::StpStateFamily::kDs256
                                     : plan.hot_rt_dim ? ssu::StpStateFamily::kRtDim
                                                       : ssu::StpStateFamily::kDim64;
  if (p.state_dtype == MAMBA_SSU_I16)
    return ssu::launch_hot_i16(a, family, nblocks, wpb, st, rows, small_rows, simple, sc);
  // Only a build with the fp16-input kernels plans them (hot_input_dtypes), and only it defines the
  // launcher (ssu_with_f16_inputs.cu; an fp16, bf16 or fp32 state).
  if constexpr (kF16InputKernels) {
    if (p.input_dtype == MAMBA_SSU_F16)
      return ssu::launch_hot_f16_inputs(a, family, nblocks, wpb, st, rows, small_rows, simple);
  }
  if (p.state_dtype != MAMBA_SSU_F16)
    return ssu::launch_hot_state(a, family, nblocks, wpb, st, rows, small_rows, simple);
  if (p.dstate == 64)
    return launch_hot_shape<ssu::HotDs<64>::template Cfg>(a, nblocks, wpb, st, rows, small_rows,
                                                          simple);
  if (p.dstate == 256)
    return launch_hot_shape<ssu::HotDs<256>::template Cfg>(a, nblocks, wpb, st, rows, small_rows,
                                                           simple);
  if (plan.hot_rt_dim) return launch_hot_shape<ssu::HotDimConfig>(a, nblocks, wpb, st, rows,
                                                                  small_rows, simple);
  return launch_hot_shape<HotConfig>(a, nblocks, wpb, st, rows, small_rows, simple);
}

}  // namespace mamba_ssu

using namespace mamba_ssu;

extern "C" int mamba_ssu_selective_state_update_check(const mamba_ssu_params *params) {
  clear_error();
  if (params == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "params: null pointer");
  mamba_ssu_seed seed;
  SeedNames names;
  if (int s = legacy_seed(*params, &seed, &names)) return s;
  return ssu_check(params, seed, names);
}

namespace {
// ALGO_AUTO resolved on the device *d, or (d null) on planning_props(num_sms)'s, for a head dim
// of dim rows and a state of state_dtype; SIMPLE, VERTICAL and HORIZONTAL resolve to
// themselves. Failure: minus the status.
int resolve(int32_t algorithm, int64_t batch, int64_t nheads, int64_t dim, int32_t state_dtype,
            int32_t num_sms, const mamba_ssu_device_props *d) {
  if (algorithm == MAMBA_SSU_ALGO_SIMPLE || algorithm == MAMBA_SSU_ALGO_VERTICAL ||
      algorithm == MAMBA_SSU_ALGO_HORIZONTAL)
    return algorithm;
  if (algorithm != MAMBA_SSU_ALGO_AUTO)
    return -fail(MAMBA_SSU_ERROR_INVALID_VALUE,
                 "algorithm: expected AUTO (0), SIMPLE (1), VERTICAL (2) or HORIZONTAL (3), got %d",
                 algorithm);
  mamba_ssu_device_props queried;
  if (d == nullptr) {
    if (int s = planning_props(num_sms, &queried)) return -s;
    d = &queried;
  } else if (int s = check_props(d)) {
    return -s;
  }
  return auto_algorithm(batch, nheads, dim, state_dtype, *d);
}
}  // namespace

// The two resolvers without the state: AUTO as for an F32 state (which FlashInfer's rule never
// sends to HORIZONTAL): SIMPLE or VERTICAL.
extern "C" int mamba_ssu_resolve_algorithm(int32_t algorithm, int64_t batch, int64_t nheads,
                                           int32_t num_sms) {
  clear_error();
  return resolve(algorithm, batch, nheads, 64, MAMBA_SSU_F32, num_sms, nullptr);
}

extern "C" int mamba_ssu_resolve_algorithm_for_device(int32_t algorithm, int64_t batch,
                                                      int64_t nheads,
                                                      const mamba_ssu_device_props *props) {
  clear_error();
  if (props == nullptr) return -fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "props: null pointer");
  return resolve(algorithm, batch, nheads, 64, MAMBA_SSU_F32, 0, props);
}

extern "C" int mamba_ssu_resolve_algorithm_for_state(int32_t algorithm, int64_t batch,
                                                     int64_t nheads, int64_t dim,
                                                     int32_t state_dtype,
                                                     const mamba_ssu_device_props *props) {
  clear_error();
  if (props == nullptr) return -fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "props: null pointer");
  if (!is_float_dtype(state_dtype))
    return -fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                 "state_dtype: expected F32, F16 or BF16, got %d", state_dtype);
  if (dim < 1)
    return -fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "dim: expected >= 1, got %lld", ll(dim));
  if (algorithm == MAMBA_SSU_ALGO_HORIZONTAL && !hz_dim_ok(dim))
    return -fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                 "algorithm: HORIZONTAL needs a head dim that is a multiple of 64 and at most "
                 "256 (FlashInfer's horizontal kernel), got dim %lld",
                 ll(dim));
  return resolve(algorithm, batch, nheads, dim, state_dtype, 0, props);
}

extern "C" int mamba_ssu_selective_state_update_plan(const mamba_ssu_params *params,
                                                     int32_t num_sms,
                                                     mamba_ssu_launch_plan *out) {
  clear_error();
  if (out == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "out: null pointer");
  if (params == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "params: null pointer");
  mamba_ssu_seed seed;
  SeedNames names;
  if (int s = legacy_seed(*params, &seed, &names)) return s;
  if (int s = ssu_check(params, seed, names)) return s;
  mamba_ssu_device_props d;
  if (int s = planning_props(num_sms, &d)) return s;
  return ssu_plan(*params, d, out);
}

extern "C" int mamba_ssu_selective_state_update(mamba_ssu_stream_t stream,
                                                const mamba_ssu_params *params) {
  clear_error();
  if (params == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "params: null pointer");
  mamba_ssu_seed seed;
  SeedNames names;
  if (int s = legacy_seed(*params, &seed, &names)) return s;
  if (int s = ssu_check(params, seed, names)) return s;
  // The block's philox_rounds, sr_rule and seed_next are the seed's (legacy_seed).
  return ssu_launch(stream, *params, seed);
}
