// ssu_single_hz.cu — host side of the single-token selective-state-update in FlashInfer's
// "horizontal" mapping: planning (a pure function of a checked parameter block and a device's
// properties) and dispatch. The device code is ssu_hz.cuh; ssu.cu checks the block (ssu_check:
// the head dim rule of hz_dim_ok) and sends the calls whose algorithm resolves to HORIZONTAL
// here. (The name sorts after ssu_mtp*.cu, so that the device link, which takes the objects in
// that order, lays out the multi-token kernels' static shared memory as before: a translation
// unit linked ahead of them swaps their shared variables' addresses.)
//
// Dispatch: an F16 state with BF16 inputs and weights and 0, 5 or 10 Philox rounds runs a
// kernel with the round count and the input dtypes compiled in; a BF16 or F32 state with BF16
// inputs and weights likewise (no rounding choice there); in a build with
// MAMBA_SSU_F16_INPUT_KERNELS the same with FP16 inputs and weights (hz_kernel_f16in,
// ssu_with_f16_inputs.cu); every other combination the kernel of its state dtype that reads the
// input dtypes and the round count at run time. The
// stochastic-rounding rule (0.7.2's or 0.7.4's conversion) is a run-time value of every kernel:
// their fast pair conversion is exact under both, and the rare pairs it flags are converted by
// the call's rule (sr.cuh).
#include <algorithm>
#include <limits>

#include "checks.h"
#include "common.cuh"
#include "launch.h"
#include "ssu_hz.cuh"

namespace mamba_ssu {

bool hz_dim_ok(int64_t dim) { return dim % 64 == 0 && dim >= 64 && dim <= 256; }

namespace {

using hz::Args;

// Rows per warp: up to 64 (4 tiles of 16 rows; a multiple of 16 dividing every head dim the
// horizontal kernel takes), halved while the grid has fewer than kMinWarpsPerSm warps per SM
// (of the device's warp slots, scaled as tuning.h's thresholds are), down to 16. Not tuned
// on a GPU yet: a warp's fixed work (its slot indices, dt', dA, B * dt' and C into shared
// memory) is small against 16 rows of a head.
constexpr int kMaxRowsPerWarp = 64;
constexpr int64_t kMinWarpsPerSm = 32;
// Calls that read at least this many bytes of state, in rows of 4 stages or more, and do not
// round stochastically keep 8 tiles in flight per warp, the others 4 (hz::kTilesInFlightLarge;
// same-run A/B on the H200: docs/perf-notes.md, "The horizontal kernel: tiles in flight"), and
// run hz_kernel_grouped (copies by groups of 4 stages: "The horizontal kernel: where the bytes
// move").
constexpr int64_t kLargeCallStateBytes = int64_t(64) << 20;
// The same for the calls that round stochastically with the fp16 state's 5 or 10 rounds
// compiled in (bf16 inputs, and fp16 ones in a build with them), at a dstate of 4 or 8 stages a
// row: hz_kernel_grouped (hz_kernel_f16in grouped) from 128 MiB of state (same-run A/B on the
// H100: docs/perf-notes.md, "The horizontal kernel: grouped copies with stochastic rounding"; at
// 64 MiB it is the slower of the two).
constexpr int64_t kLargeSrCallStateBytes = int64_t(128) << 20;
// Calls without stochastic rounding on a kernel with the input dtypes compiled in, in rows of
// kWideRowStages stages (512 bytes: an fp16 or bf16 state at dstate 256, an fp32 one at 128),
// that read less than kLargeCallStateBytes (hz_kernel_grouped, as from that size on): up to
// 32 rows per warp, halved below kMinWarpsPerSmWideRows warps per SM (a warp's staging of B * dt'
// and C, a row's worth each, spread over twice the rows), and 8 tiles in flight. Same-run A/B on
// the H100 (docs/perf-notes.md, "The horizontal kernel without SR: rows of 512 bytes on small
// calls"): 1.08x at head dim 64 x dstate 256 x 128 heads x batch 8 (2-byte state), 1.11x with an
// fp32 state at dstate 128; in the calls of 64 MiB 64 rows a warp lost 3-6 %, and in rows of
// 1 KiB (an fp32 state at dstate 256) 32 rows lost 6 %.
constexpr int64_t kWideRowStages = 8;
constexpr int kMaxRowsPerWarpWideRows = 32;
constexpr int64_t kMinWarpsPerSmWideRows = 8;
// Dynamic shared memory a kernel launch takes without cudaFuncSetAttribute's opt-in.
constexpr int kDefaultSmemBytes = 48 << 10;

struct Plan {
  int rows_per_warp;
  int tiles_in_flight;
  int64_t warps_per_head, total_warps, blocks;
  unsigned nblocks;
  size_t smem;
  bool compiled;  // a kernel with the input dtypes (and the round count) compiled in
  bool f16_inputs;  // ... and those are FP16 (hz_kernel_f16in)
};

// A kernel with the input dtypes compiled in (hot_input_dtypes: BF16 inputs and weights, and in
// a build with kF16InputKernels FP16 ones; HORIZONTAL refuses an int16 state before the plan),
// and for an F16 state the round count.
bool compiled_kernel(const mamba_ssu_params &p) {
  if (!hot_input_dtypes(p.state_dtype, p.input_dtype, p.weight_dtype)) return false;
  if (p.state_dtype != MAMBA_SSU_F16) return true;
  return p.philox_rounds == 0 || p.philox_rounds == 5 || p.philox_rounds == 10;
}

int plan(const mamba_ssu_params &p, const mamba_ssu_device_props &d, Plan *out) {
  if (int s = check_props(&d)) return s;
  if (!hz_dim_ok(p.dim))  // ssu_check rejects it first: a planning bug, never launched
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "launch plan: head dim %lld for HORIZONTAL",
                ll(p.dim));
  const int64_t blocks16 = p.dim / hz::kTileRows;  // 4, 8, 12 or 16
  const int64_t heads = p.batch * p.nheads;        // < 2^31 (ssu_check's grid bound)
  // The bytes of a state row and of the state the call reads (< 2^63: each factor is bounded by
  // ssu_check).
  const int64_t row_bytes = p.dstate * float_bytes(p.state_dtype);
  const int64_t state_bytes = heads * p.dim * row_bytes;
  const bool rounds = p.state_dtype == MAMBA_SSU_F16 && p.philox_rounds > 0;
  const bool compiled = compiled_kernel(p);
  const bool wide_small = compiled && !rounds && !uneven_dstate(p.dstate) &&
                          row_bytes == kWideRowStages * hz::kStageBytes &&
                          state_bytes < kLargeCallStateBytes;
  const int64_t min_warps = wide_small ? kMinWarpsPerSmWideRows : kMinWarpsPerSm;
  int rpw = wide_small ? kMaxRowsPerWarpWideRows : kMaxRowsPerWarp;
  while (rpw > hz::kTileRows &&
         (blocks16 % (rpw / hz::kTileRows) != 0 ||
          heads * (p.dim / rpw) < scaled_warps(d, min_warps) * d.num_sms))
    rpw /= 2;
  Plan pl{};
  pl.rows_per_warp = rpw;
  pl.warps_per_head = p.dim / rpw;
  pl.total_warps = heads * pl.warps_per_head;
  pl.blocks = (pl.total_warps + hz::kWarpsPerBlock - 1) / hz::kWarpsPerBlock;
  const int64_t nblocks = pl.blocks + (p.seed_next != nullptr ? 1 : 0);
  if (nblocks < 1 || nblocks > std::numeric_limits<int32_t>::max() ||
      pl.total_warps > std::numeric_limits<int32_t>::max())
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                "launch plan: no valid grid for HORIZONTAL (%lld blocks)", ll(nblocks));
  pl.nblocks = static_cast<unsigned>(nblocks);
  // Rows of at least 4 stages (256 bytes): with 2 a warp has too few tiles to refill the ring.
  const bool long_rows = row_bytes >= 4 * hz::kStageBytes;
  // 8 tiles only where a block's shared memory stays within the 48 KiB a launch takes without
  // an opt-in (at dstate 512 the staged B * dt' and C rows leave room for 4).
  const bool large_fits = hz::block_smem_bytes(static_cast<int>(p.dstate),
                                               hz::kTilesInFlightLarge) <= kDefaultSmemBytes;
  // An uneven dstate (96, 160, 192, 224: rows of 3, 5, 6 or 7 stages of a 2-byte state, twice
  // as many of an fp32 one; an fp32 state at 32 to 240: 2 to 15 stages; above 256 up to 16
  // stages of a 2-byte state, 32 of an fp32 one) runs the kernel of any stage count, with the
  // same dtypes and round counts compiled in as the other dstates.
  pl.compiled = compiled;
  pl.f16_inputs = pl.compiled && p.input_dtype == MAMBA_SSU_F16;
  // With stochastic rounding only the kernels with the round count compiled in take the grouped
  // copies, and not the kernel of any stage count.
  const bool large = rounds ? pl.compiled && !uneven_dstate(p.dstate) &&
                                  state_bytes >= kLargeSrCallStateBytes
                            : state_bytes >= kLargeCallStateBytes || wide_small;
  pl.tiles_in_flight =
      long_rows && large && large_fits ? hz::kTilesInFlightLarge : hz::kTilesInFlightSmall;
  pl.smem = static_cast<size_t>(
      hz::block_smem_bytes(static_cast<int>(p.dstate), pl.tiles_in_flight));
  *out = pl;
  return MAMBA_SSU_SUCCESS;
}

// The calls with 8 tiles in flight (rows of 4 stages or more) run the kernels with the round
// count compiled in (kRounds >= 0) as hz_kernel_grouped (copies by groups of 4 stages).
template <int kState, int kRounds, bool kBf16>
int launch(const Args &a, const Plan &pl, cudaStream_t stream) {
  if constexpr (kRounds >= 0) {
    if (pl.tiles_in_flight == hz::kTilesInFlightLarge) {
      hz::hz_kernel_grouped<kState, kRounds, kBf16>
          <<<pl.nblocks, hz::kThreadsPerBlock, pl.smem, stream>>>(a);
      return check_launch("selective_state_update (horizontal) launch");
    }
  }
  hz::hz_kernel<kState, kRounds, kBf16>
      <<<pl.nblocks, hz::kThreadsPerBlock, pl.smem, stream>>>(a);
  return check_launch("selective_state_update (horizontal) launch");
}

}  // namespace

int hz_plan(const mamba_ssu_params &p, const mamba_ssu_device_props &d,
            mamba_ssu_launch_plan *out) {
  Plan pl;
  if (int s = plan(p, d, &pl)) return s;
  out->grid_blocks = pl.nblocks;
  // A block's 4 warps serve consecutive warps of the grid: one head's, or several heads'.
  out->blocks_per_head =
      (pl.warps_per_head + hz::kWarpsPerBlock - 1) / hz::kWarpsPerBlock;
  out->threads_per_block = hz::kThreadsPerBlock;
  out->warps_per_block = hz::kWarpsPerBlock;
  out->rows_per_warp = pl.rows_per_warp;
  out->algorithm = MAMBA_SSU_ALGO_HORIZONTAL;
  out->compiled_kernel = pl.compiled ? 1 : 0;
  out->num_sms = d.num_sms;
  return MAMBA_SSU_SUCCESS;
}

int hz_launch(mamba_ssu_stream_t stream, const mamba_ssu_params &p, const mamba_ssu_seed &seed,
              const mamba_ssu_device_props &d) {
  Plan pl;
  if (int s = plan(p, d, &pl)) return s;
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
  a.total_warps = pl.total_warps;
  a.nheads = static_cast<uint32_t>(p.nheads);
  a.heads_per_group = static_cast<uint32_t>(p.nheads / p.ngroups);
  a.warps_per_head = static_cast<uint32_t>(pl.warps_per_head);
  a.rows_per_warp = pl.rows_per_warp;
  a.dim = static_cast<int32_t>(p.dim);
  a.dstate = static_cast<int32_t>(p.dstate);
  a.tiles_in_flight = pl.tiles_in_flight;
  a.input_dtype = p.input_dtype;
  a.weight_dtype = p.weight_dtype;
  a.index_dtype = p.index_dtype;
  a.dt_softplus = p.dt_softplus != 0;
  a.update_state = p.update_state != 0;

  const auto st = reinterpret_cast<cudaStream_t>(stream);
  // Only a build with the fp16-input kernels plans them (hot_input_dtypes) and defines their
  // launcher.
  if constexpr (kF16InputKernels) {
    if (pl.f16_inputs)
      return hz::launch_f16_inputs(a, p.state_dtype, uneven_dstate(p.dstate),
                                   pl.tiles_in_flight == hz::kTilesInFlightLarge, pl.nblocks,
                                   pl.smem, st);
  }
  if (uneven_dstate(p.dstate))
    return hz::launch_uneven(a, p.state_dtype, pl.compiled, pl.nblocks, pl.smem, st);
  return hz::with_kernel_params(p.state_dtype, pl.compiled, a.philox_rounds,
                                [&](auto state, auto rounds, auto bf16) {
                                  return launch<decltype(state)::value, decltype(rounds)::value,
                                                decltype(bf16)::value>(a, pl, st);
                                });
}

}  // namespace mamba_ssu
