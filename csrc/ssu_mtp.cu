// ssu_mtp.cu — host side of the multi-token selective-state-update: planning (a pure function
// of the checked parameters and the SM count) and dispatch. The contract check is
// ssu_mtp_check.cu, the device code ssu_mtp.cuh.
//
// Dispatch: F16 state, BF16 inputs and weights, dstate 64, 128 or 256 and 0, 5 or 10 Philox
// rounds run compiled-in kernels (mtp_kernel<true, dstate, rounds, rows per group, small>: one
// row per group below Tuning::kMtpTwoRowPairs (sequence, head) pairs, in the small-grid form
// when the grid fits the small kernel's floor of blocks per SM (Tuning::kMtpSmallBlocks; at
// dstate 256 kMtpDs256SmallBlocks / kMtpDs256SmallSrBlocks); two rows from there on; without SR
// four rows from Tuning::kMtpFourRowPairs pairs on, at most kMtpDs256MaxRows at dstate 256;
// fewer where a block's shared memory would pass 48 KiB; tuning.h) when num_accepted_tokens and
// cu_seqlens (where given) have the slot indices' dtype; a BF16 state without SR (otherwise as
// above) the same kernels' code for a BF16 state (mtp_kernel_bf16<dstate, rows per group,
// small>, ssu_mtp_bf16.cu), an I16 state (no SR) likewise (mtp_kernel_i16_hot, with its decode
// scales, ssu_mtp_i16.cu); everything else that passes the check
// runs a kernel per dstate that takes dtypes, index dtypes and rounds at run time
// (mtp_kernel<false, dstate, -1, 1>; with an fp32 state mtp_kernel<false, dstate, -1, 1, false,
// true>, FlashInfer's 4-column lane blocks of an fp32 state; an I16 state mtp_kernel_i16:
// ssu_mtp.cuh), or, for inputs other than bf16, the same kernels with FlashInfer's uniform update
// of a column pair (mtp::uniform_pairs; launch_uniform, ssu_with_uniform_pairs.cu). Above dstate
// 256 (long_dstate) one kernel per state kind serves every dstate up to 512 (kDstate
// mtp::kMtpLongRows: FlashInfer's 512-column tile, the row's length at run time), with a
// shared-memory opt-in past 48 KiB.
#include <algorithm>
#include <limits>

#include "checks.h"
#include "common.cuh"
#include "launch.h"
#include "ssu_mtp.cuh"
#include "tuning.h"

namespace mamba_ssu {
namespace {

using tuning::Tuning;

// The static shared memory of the kernel a problem runs: mtp::kStaticSmemBytes, and the hot
// int16 kernels' per-token scale rows.
int64_t static_smem(const mamba_ssu_mtp_params &p, bool hot) {
  return mtp::kStaticSmemBytes +
         (hot && p.state_dtype == MAMBA_SSU_I16 ? mtp::kI16HotStaticSmemBytes : 0);
}

bool is_hot(const mamba_ssu_mtp_params &p) {
  return (p.state_dtype == MAMBA_SSU_F16 ||
          ((p.state_dtype == MAMBA_SSU_BF16 || p.state_dtype == MAMBA_SSU_I16) &&
           p.philox_rounds == 0)) &&
         hot_input_dtypes(p.state_dtype, p.input_dtype, p.weight_dtype) &&
         (p.dstate == 64 || p.dstate == 128 || p.dstate == 256) &&
         (p.philox_rounds == 0 || p.philox_rounds == 5 || p.philox_rounds == 10) &&
         // The compiled-in kernels read every index tensor with index_dtype.
         (p.num_accepted_tokens == nullptr ||
          own_index_dtype(p.num_accepted_tokens_dtype, p.index_dtype) == p.index_dtype) &&
         (p.cu_seqlens == nullptr ||
          own_index_dtype(p.cu_seqlens_dtype, p.index_dtype) == p.index_dtype);
}


// Rows per group (hot kernels): two rows computed together (one B/C load per token for both)
// from Tuning::kMtpTwoRowPairs (sequence, head) pairs on, one below; without SR, from
// Tuning::kMtpFourRowPairs pairs on, four rows per group: a block's 64 rows are all in registers
// and written token by token (the block's whole 16 KiB state of a token before the next
// token's). With SR four rows were slower (their Philox words need the registers): SR keeps two.
// At dstate 256 at most Tuning::kMtpDs256MaxRows (mtp_max_rows); where a block's shared memory
// (B/C of every token, lane partials of every row, x and z) would pass the per-block limit,
// half the rows, down to one (which always fits).
// Blocks per (sequence, head): at least enough for 64 rows per block (the rows a block
// stages); doubled, up to 4, while the grid stays within one wave of resident blocks (the
// kernel's register floor times the SM count) and a block keeps a full pass of rows for its
// groups (16 rows per row computed together).
struct Plan {
  int64_t blocks_per_head, rows_per_block, blocks;
  unsigned nblocks;
  size_t smem;
  bool hot;
  int rows_per_group;
  bool small;  // the small-grid kernel (mtp_kernel<..., kSmall = true>)
};

// The grid of the hot kernels with r rows per group (or of the run-time kernels), unchecked.
// rows > 0: blocks of that many rows instead (the full-pass plan below).
void grid_for(const mamba_ssu_mtp_params &p, const mamba_ssu_device_props &d, bool hot, int r,
              Plan *g, int64_t rows = 0) {
  const int64_t heads = p.batch * p.nheads;  // < 2^31 (checked)
  const int min_blocks =
      !hot ? 4
           : mtp::mtp_min_blocks(true, static_cast<int>(p.dstate),
                                 static_cast<int>(p.philox_rounds), r, false);
  int64_t bph = (p.dim + mtp::kMaxRowsPerBlock - 1) / mtp::kMaxRowsPerBlock;
  // At most 4 (or the 64-row minimum), which bounds the grid in the check.
  const int64_t pass = int64_t{mtp::kGroups} * r;
  const int64_t max_bph = std::max<int64_t>(bph, std::min<int64_t>(4, (p.dim + pass - 1) / pass));
  // One wave of the blocks resident on d, with the shared memory of the first grid tried.
  auto smem_of = [&](int64_t b) {
    return mtp::mtp_smem_bytes(static_cast<int>(p.ntokens),
                               mtp::mtp_tile(static_cast<int>(p.dstate)),
                               static_cast<int>((p.dim + b - 1) / b), p.z != nullptr,
                               mtp::mtp_bf16_stage(hot, r), hot ? r : 0);
  };
  const int64_t wave =
      int64_t{resident_blocks(d, min_blocks, mtp::kThreads,
                              static_cast<int64_t>(smem_of(bph)) + static_smem(p, hot))} *
      d.num_sms;
  if (rows > 0)
    bph = (p.dim + rows - 1) / rows;
  else
    while (2 * bph <= max_bph && heads * 2 * bph <= wave) bph *= 2;
  const int64_t rpb = (p.dim + bph - 1) / bph;
  g->blocks_per_head = bph;
  g->rows_per_block = rpb;
  // heads < 2^31 and bph <= max(4, ceil(dim / 16)) < 2^27: no overflow (the check bounds it by
  // INT32_MAX already; plan_launch checks again).
  g->blocks = heads * bph + (p.seed_next != nullptr ? 1 : 0);
  g->nblocks = 0;
  g->smem = smem_of(bph);
  g->hot = hot;
  g->rows_per_group = r;
  g->small = false;
}

int plan_launch(const mamba_ssu_mtp_params &p, const mamba_ssu_device_props &d, Plan *out) {
  if (int s = check_props(&d)) return s;
  // The per-block limit: 48 KiB without an opt-in (smem_per_block); the long-row kernels
  // (long_dstate: B and C of every token over a 512-column tile, up to 64 KiB at 16 tokens)
  // opt in (mtp::allow_long_smem) to the device's limit for one block, its shared memory per SM
  // less what the system reserves per block (227 KiB on sm_90, 163 KiB on sm_80, 99 KiB on
  // sm_86, 89 and 120: cudaDevAttrMaxSharedMemoryPerBlockOptin). A call past it is refused.
  const int64_t smem_limit = long_dstate(p.dstate)
                                 ? int64_t{d.smem_per_sm} - d.reserved_smem_per_block
                                 : int64_t{d.smem_per_block};
  const bool hot = is_hot(p);
  const int64_t heads = p.batch * p.nheads;  // < 2^31 (checked)
  int r = !hot                                        ? 1
          : p.philox_rounds == 0 && heads >= Tuning::kMtpFourRowPairs ? 4
          : heads >= Tuning::kMtpTwoRowPairs                          ? 2
                                                                      : 1;
  r = std::min(r, mtp::mtp_max_rows(static_cast<int>(p.dstate)));
  // A block's static and dynamic shared memory together within the per-block limit (48 KiB
  // without an opt-in: a launch past it is refused).
  auto fits = [&](const Plan &g) {
    return static_cast<int64_t>(g.smem) + static_smem(p, hot) <= smem_limit;
  };
  Plan g;
  grid_for(p, d, hot, r, &g);
  // The lane partials of four rows (4 x 8 floats per token and group; of two at dstate 256,
  // with twice the B/C) pass 48 KiB of shared memory at long token counts: half the rows there.
  while (g.rows_per_group > 1 && !fits(g)) grid_for(p, d, hot, g.rows_per_group / 2, &g);
  // Full passes (Tuning::kMtpFullPasses): where a block's rows leave its last pass of row
  // groups part-empty (head dim 80: 40-row blocks, 32-row passes of two-row groups), one-row
  // groups on blocks of kGroups rows, every group busy in the block's one pass.
  if (hot && g.rows_per_group > 1 && p.dim % mtp::kGroups == 0 &&
      g.rows_per_block % (int64_t{mtp::kGroups} * g.rows_per_group) != 0 &&
      (Tuning::kMtpFullPasses > 1 || (Tuning::kMtpFullPasses == 1 && p.philox_rounds == 0))) {
    Plan f;
    grid_for(p, d, hot, 1, &f, mtp::kGroups);
    if (fits(f)) g = f;
  }
  // Fewest passes with SR (Tuning::kMtpSrPasses): the two-row SR plans whose blocks leave
  // their last pass part-empty take the rows per block with the fewest passes of row groups per
  // (sequence, head), the fewest blocks among equals (head dim 80: one block of 80 rows in three
  // passes instead of two blocks of 40 rows in two passes each); not at dstate 128, where the
  // measurement found no gain.
  const int64_t pass = int64_t{mtp::kGroups} * g.rows_per_group;
  auto passes = [&](const Plan &f) {
    return f.blocks_per_head * ((f.rows_per_block + pass - 1) / pass);
  };
  if (hot && Tuning::kMtpSrPasses != 0 && p.philox_rounds > 0 && p.dstate != 128 &&
      g.rows_per_group > 1 && g.rows_per_block % pass != 0) {
    for (int64_t b = 1; b <= 4; ++b) {
      const int64_t rows = (p.dim + b - 1) / b;
      if (rows > Tuning::kMtpPassesMaxRows) continue;
      Plan f;
      grid_for(p, d, hot, g.rows_per_group, &f, rows);
      if (f.blocks_per_head != b || !fits(f)) continue;
      const int64_t pf = passes(f), pg = passes(g);
      if (pf < pg || (pf == pg && f.blocks_per_head < g.blocks_per_head)) g = f;
    }
  }
  if (g.blocks > std::numeric_limits<int32_t>::max())
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                "batch * nheads * ceil(dim / 64): expected a grid of <= %d blocks, got %lld x "
                "%lld x %lld",
                std::numeric_limits<int32_t>::max(), ll(p.batch), ll(p.nheads),
                ll(g.blocks_per_head));
  const int64_t rpb = g.rows_per_block, bph = g.blocks_per_head;
  if (rpb < 1 || rpb > std::max<int64_t>(mtp::kMaxRowsPerBlock, Tuning::kMtpPassesMaxRows) ||
      bph * rpb < p.dim || !fits(g))
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                "launch plan: no valid grid (rows per block %lld, blocks per head %lld, shared "
                "memory %zu bytes)",
                ll(rpb), ll(bph), g.smem);
  g.nblocks = static_cast<unsigned>(g.blocks);
  // The small-grid kernels (one row per group) where the grid fits their occupancy floor.
  g.small = hot && g.rows_per_group == 1 &&
            g.blocks <= int64_t{resident_blocks(
                            d,
                            mtp::mtp_min_blocks(true, static_cast<int>(p.dstate),
                                                static_cast<int>(p.philox_rounds), 1, true),
                            mtp::kThreads, static_cast<int64_t>(g.smem) + static_smem(p, hot))} *
                            d.num_sms;
  *out = g;
  return MAMBA_SSU_SUCCESS;
}

template <bool kHot, int kDstate, int kRounds, int kR = 1, bool kSmall = false, bool kF32 = false>
int launch(const mtp::Args &a, const Plan &plan, cudaStream_t st) {
  mtp::mtp_kernel<kHot, kDstate, kRounds, kR, kSmall, kF32>
      <<<plan.nblocks, mtp::kThreads, plan.smem, st>>>(a);
  return check_launch("multi-token selective-state-update kernel launch");
}

// The plan's compiled-in kernel at dstate kDstate with kRounds rounds (0, 5 or 10).
template <int kDstate, int kRounds>
int launch_hot(const mtp::Args &a, const Plan &plan, cudaStream_t st) {
  return mtp::launch_hot_form<kDstate, kRounds>(
      plan.rows_per_group, plan.small, [&](auto rows, auto small) {
        constexpr int kR = decltype(rows)::value;
        constexpr bool kSmall = decltype(small)::value;
        return launch<true, kDstate, kRounds, kR, kSmall>(a, plan, st);
      });
}

}  // namespace

int mtp_plan(const mamba_ssu_mtp_params &p, const mamba_ssu_device_props &d,
             mamba_ssu_launch_plan *out) {
  const int sms = d.num_sms;
  Plan plan;
  if (int s = plan_launch(p, d, &plan)) return s;
  out->grid_blocks = plan.blocks;
  out->blocks_per_head = plan.blocks_per_head;
  out->threads_per_block = mtp::kThreads;
  out->warps_per_block = mtp::kThreads / 32;
  // Rows one warp serves: its 4 groups take rows_per_block / 16 rows each.
  out->rows_per_warp = static_cast<int32_t>(
      4 * ((plan.rows_per_block + mtp::kGroups - 1) / mtp::kGroups));
  // (the rows a group computes together, 1, 2 or 4, are not part of the plan's fields)
  out->algorithm = MAMBA_SSU_ALGO_SIMPLE;
  out->compiled_kernel = plan.hot ? 1 : 0;
  out->num_sms = sms;
  return MAMBA_SSU_SUCCESS;
}

int mtp_launch(mamba_ssu_stream_t stream, const mamba_ssu_mtp_params &p,
               const mamba_ssu_seed &seed, const StateScale &scale) {
  mamba_ssu_device_props d;
  if (int s = launch_props(p.num_sms, &d)) return s;
  Plan plan;
  if (int s = plan_launch(p, d, &plan)) return s;

  mtp::Args a{};
  a.x = p.x;
  a.dt = p.dt;
  a.dt_bias = p.dt_bias;
  a.B = p.B;
  a.C = p.C;
  a.D = p.D;
  a.z = p.z;
  a.A = p.A;
  a.out = p.out;
  a.state = p.state;
  a.inter = p.intermediate_states;
  a.sbi = p.state_batch_indices;
  a.dst = p.dst_state_batch_indices;
  a.nat = p.num_accepted_tokens;
  a.cu = p.cu_seqlens;
  a.inter_idx = p.intermediate_state_indices;
  lower_seed(seed, &a);
  a.state_stride = p.state_stride_batch;
  a.x_sb = p.x_stride_batch;
  a.x_st = p.x_stride_token;
  a.dt_sb = p.dt_stride_batch;
  a.dt_st = p.dt_stride_token;
  a.B_sb = p.B_stride_batch;
  a.B_st = p.B_stride_token;
  a.C_sb = p.C_stride_batch;
  a.C_st = p.C_stride_token;
  a.z_sb = p.z_stride_batch;
  a.z_st = p.z_stride_token;
  a.out_sb = p.out_stride_batch;
  a.out_st = p.out_stride_token;
  a.sbi_s = p.state_batch_indices_stride;
  a.sbi_sc = p.state_batch_indices_stride_col;
  a.sbi_cols = p.state_batch_indices_cols;
  a.dst_s = p.dst_state_batch_indices_stride;
  a.dst_sc = p.dst_state_batch_indices_stride_col;
  a.nat_s = p.num_accepted_tokens_stride;
  a.cu_s = p.cu_seqlens_stride;
  a.ii_s = p.intermediate_state_indices_stride;
  a.pad_slot_id = p.pad_slot_id;
  a.state_cache_size = p.state_cache_size;
  a.inter_cache_size = p.intermediate_cache_size;
  a.cache_steps = p.cache_steps;
  a.total_tokens = p.total_tokens;
  a.nheads = static_cast<uint32_t>(p.nheads);
  a.heads_per_group = static_cast<uint32_t>(p.nheads / p.ngroups);
  a.blocks_per_head = static_cast<uint32_t>(plan.blocks_per_head);
  mtp::mtp_fast_div_params(a.blocks_per_head, &a.bph_mul, &a.bph_shr);
  mtp::mtp_fast_div_params(a.nheads, &a.nh_mul, &a.nh_shr);
  mtp::mtp_fast_div_params(a.heads_per_group, &a.hpg_mul, &a.hpg_shr);
  a.ntokens = static_cast<int32_t>(p.ntokens);
  a.dim = static_cast<int32_t>(p.dim);
  a.dstate = static_cast<int32_t>(p.dstate);
  a.rows_per_block = static_cast<int32_t>(plan.rows_per_block);
  a.state_dtype = p.state_dtype;
  a.input_dtype = p.input_dtype;
  a.weight_dtype = p.weight_dtype;
  a.index_dtype = p.index_dtype;
  a.nat_dtype = static_cast<int16_t>(own_index_dtype(p.num_accepted_tokens_dtype, p.index_dtype));
  a.cu_dtype = static_cast<int16_t>(own_index_dtype(p.cu_seqlens_dtype, p.index_dtype));
  a.dt_softplus = p.dt_softplus != 0;
  a.update_state = p.update_state != 0;
  a.varlen = p.cu_seqlens != nullptr;

  const auto st = reinterpret_cast<cudaStream_t>(stream);
  int s;
  mtp::ScaleArgs sc{};
  if (p.state_dtype == MAMBA_SSU_I16) {
    sc.state_scale = const_cast<float *>(scale.data);
    sc.slot_stride = scale.slot_stride;
    sc.inter_scales = scale.data != nullptr && p.intermediate_states != nullptr ? scale.inter
                                                                                : nullptr;
    sc.inter_entries = scale.inter_entries;
  }
  if (plan.hot && p.state_dtype == MAMBA_SSU_I16) {
    s = mtp::launch_hot_i16(a, sc, static_cast<int>(p.dstate), plan.rows_per_group, plan.small,
                            plan.nblocks, plan.smem, st);
  } else if (kF16InputKernels && plan.hot && p.input_dtype == MAMBA_SSU_F16) {
    // Only a build with the fp16-input kernels plans them (hot_input_dtypes) and defines the
    // launcher (an fp16 or a bf16 state).
    if constexpr (kF16InputKernels)
      s = mtp::launch_hot_f16_inputs(a, p.state_dtype == MAMBA_SSU_BF16,
                                     static_cast<int>(p.dstate),
                                     static_cast<int>(p.philox_rounds), plan.rows_per_group,
                                     plan.small, plan.nblocks, plan.smem, st);
    else
      s = fail(MAMBA_SSU_ERROR_UNSUPPORTED, "no compiled-in fp16-input kernels in this build");
  } else if (plan.hot && p.state_dtype == MAMBA_SSU_BF16) {
    s = mtp::launch_hot_bf16(a, static_cast<int>(p.dstate), plan.rows_per_group, plan.small,
                             plan.nblocks, plan.smem, st);
  } else if (plan.hot) {
    s = mtp::with_even_dstate(static_cast<int>(p.dstate), [&](auto dstate) {
      return mtp::with_hot_rounds(static_cast<int>(p.philox_rounds), [&](auto rounds) {
        return launch_hot<decltype(dstate)::value, decltype(rounds)::value>(a, plan, st);
      });
    });
  } else if (mtp::uniform_pairs(p.input_dtype)) {
    s = mtp::launch_uniform(a, sc, static_cast<int>(p.dstate), plan.nblocks, plan.smem, st);
  } else if (p.state_dtype == MAMBA_SSU_I16) {
    s = uneven_dstate(p.dstate)
            ? mtp::launch_uneven_i16(a, sc, static_cast<int>(p.dstate), plan.nblocks, plan.smem, st)
            : mtp::launch_i16(a, sc, static_cast<int>(p.dstate), plan.nblocks, plan.smem, st);
  } else if (uneven_dstate(p.dstate)) {
    s = mtp::launch_uneven(a, static_cast<int>(p.dstate), p.state_dtype == MAMBA_SSU_F32,
                           plan.nblocks, plan.smem, st);
  } else if (p.state_dtype == MAMBA_SSU_F32) {
    s = mtp::with_even_dstate(static_cast<int>(p.dstate), [&](auto dstate) {
      return launch<false, decltype(dstate)::value, -1, 1, false, true>(a, plan, st);
    });
  } else {
    s = mtp::with_even_dstate(static_cast<int>(p.dstate), [&](auto dstate) {
      return launch<false, decltype(dstate)::value, -1>(a, plan, st);
    });
  }
  return s;
}

}  // namespace mamba_ssu

using namespace mamba_ssu;

extern "C" int mamba_ssu_selective_state_update_mtp_plan(const mamba_ssu_mtp_params *params,
                                                         int32_t num_sms,
                                                         mamba_ssu_launch_plan *out) {
  clear_error();
  if (out == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "out: null pointer");
  if (params == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "params: null pointer");
  mamba_ssu_seed seed;
  SeedNames names;
  if (int s = legacy_seed(*params, &seed, &names)) return s;
  if (int s = mtp_check(params, seed, names)) return s;
  mamba_ssu_device_props d;
  if (int s = planning_props(num_sms, &d)) return s;
  return mtp_plan(*params, d, out);
}

extern "C" int mamba_ssu_selective_state_update_mtp(mamba_ssu_stream_t stream,
                                                    const mamba_ssu_mtp_params *params) {
  clear_error();
  if (params == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "params: null pointer");
  mamba_ssu_seed seed;
  SeedNames names;
  if (int s = legacy_seed(*params, &seed, &names)) return s;
  if (int s = mtp_check(params, seed, names)) return s;
  // The block's philox_rounds, sr_rule and seed_next are the seed's (legacy_seed).
  return mtp_launch(stream, *params, seed);
}
