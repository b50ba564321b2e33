// tuning.h — the kernels' live configuration: every launch-planning threshold, occupancy floor
// and per-kernel code form that was chosen by measurement, per GPU architecture. Each entry gives
// its reason in one line and cites the docs/perf-notes.md section that measured it, by title and
// date ("perf-notes: <title> (<date>)"); the figures are there, not here.
//
// Columns: only sm_90 (H200) is tuned, in struct Sm90; `Tuning` selects it for every build and
// every architecture the build targets, in host code (ssu.cu, ssu_mtp.cu: the launch planning)
// and device code (ssu.cuh, ssu_mtp.cuh: the kernels' configs) alike. Another architecture's
// column is a struct with the same members, measured on that GPU; `Tuning` would then pick it in
// device code by __CUDA_ARCH__ and in the planning by the device's compute capability (a
// parameter of the plan, like the SM count).
//
// Finished experiments are not here: a switch whose alternatives were measured and rejected was
// removed together with the code it selected; perf-notes "Build-time tuning knobs (2026-12-02:
// the live configuration in csrc/tuning.h)" lists the former switches and where their results
// are.
//
// Build-time overrides (kept for benchmark experiments on the planning):
//   MAMBA_SSU_NVCC_FLAGS="-DMAMBA_SSU_RPW_WARPS_PER_SM=N" (build.rs passes it to nvcc) replaces
//   Sm90::kRpwWarpsPerSm in `Tuning`. It changes host code only (the launch plan: rows per warp,
//   the small-grid rules), so every variant runs the same kernels; give each variant its own
//   CARGO_TARGET_DIR. Likewise "-DMAMBA_SSU_MTP_FULL_PASSES=N" replaces Sm90::kMtpFullPasses
//   (the multi-token plan at head dims whose blocks leave a pass part-empty), and
//   "-DMAMBA_SSU_MTP_SR_PASSES=N" Sm90::kMtpSrPasses (the same calls with SR).
#pragma once

#include <stdint.h>

namespace mamba_ssu {
namespace tuning {

// A hot single-token kernel, as the per-kernel choices below see it (HotConfig's parameters).
struct HotKernel {
  bool simple;  // layout: simple (true) or vertical
  int rounds;   // Philox rounds: 0 (no stochastic rounding), 5 or 10
  int rows;     // rows per chunk: 4, or 1 and 2 on small grids
  bool gate;    // z given
  int zw;       // grid-size form: 0 below kLargeGridRows, 1 from there on, -1 one form for all
};

struct Sm90 {
  // ---- Single-token SSU: launch planning (ssu.cu) ------------------------------------------

  // Rows per warp double while this many warps per SM remain (8 beat 32 and 128).
  // perf-notes: Tried (2026-11-30).
  static constexpr int kRpwWarpsPerSm = 8;
  // Most rows per warp but for the SR kernels' longer warps (without SR 32 and 64 were slower).
  // perf-notes: the SR chunk path, longer warps, occupancy, waves (2026-11-30).
  static constexpr int kMaxRowsPerWarp = 16;
  // SR kernels on large grids: 32 rows per warp spread the per-warp prologue (64: no faster).
  // perf-notes: the SR chunk path, longer warps, occupancy, waves (2026-11-30).
  static constexpr int kSrMaxRowsPerWarp = 32;
  // Rows per warp above kMaxRowsPerWarp only while this many warps per SM remain (slower at 128
  // heads x 16). perf-notes: the SR chunk path, longer warps, occupancy, waves (2026-11-30).
  static constexpr int kWideRpwWarpsPerSm = 32;
  // kRpwWarpsPerSm of the 10-round vertical kernel (twice the Philox calls): shorter warps.
  // perf-notes: L2 prefetch, pipe-neutral SR forms, zero page, rows per warp (2026-11-30).
  static constexpr int kR10VerticalRpwWarpsPerSm = 16;
  // 10 rounds: whole-head warps (64 rows) from this many warps per SM (32-row warps slower).
  // perf-notes: L2 prefetch, pipe-neutral SR forms, zero page, rows per warp (2026-11-30);
  // the chunk's overhead instructions; energy per call (2026-12-01).
  static constexpr int kR10WholeHeadWarpsPerSm = 128;
  // No SR: rows per warp halved on grids of one to this % of a wave (spreads the second wave).
  // perf-notes: the SR chunk path, longer warps, occupancy, waves; L2 prefetch, pipe-neutral SR
  // forms, zero page, rows per warp (2026-11-30).
  static constexpr int kWaveSplitPct = 150;
  // Rows from which the 4-row kernels' large-grid forms (HotKernel::zw = 1) run.
  // perf-notes: z as a compile-time fact, pad zeroing, launch floor (2026-11-30); the chunk's
  // overhead instructions (2026-12-01).
  static constexpr int64_t kLargeGridRows = 262144;
  // Small grids, in kRpwWarpsPerSm warps per SM of one row each. Below kSmall1Factor of them:
  // one-row chunks with SR, 2-row chunks without (from there on one-row chunks were slower).
  // perf-notes: what the profiler and a micro-benchmark said; 2-row chunks on small grids,
  // occupancy of the large R=10 form (2026-11-30).
  static constexpr int kSmall1Factor = 2;
  // Below kSmall2Factor: 2-row chunks with SR in the simple layout and for 5 vertical rounds.
  // perf-notes: 2-row chunks on small grids, occupancy of the large R=10 form (2026-11-30).
  static constexpr int kSmall2Factor = 4;
  // Below kSmall2R10SimpleFactor: 2-row chunks for 10 simple rounds too (slower beyond it).
  // perf-notes: 2-row chunks on small grids, occupancy of the large R=10 form (2026-11-30).
  static constexpr int kSmall2R10SimpleFactor = 8;
  // Tapered grid (the large-grid 10-round kernels): the last kTaperPct % of a wave of blocks in
  // 2^kTaperShift blocks per head, so the last wave drains sooner (quarters over one wave best).
  // perf-notes: the power cap, tapered grids; energy per call (2026-12-01).
  static constexpr int kTaperShift = 2;
  static constexpr int kTaperPct = 100;

  // ---- Single-token SSU: the hot kernels (ssu.cuh, HotConfig) -------------------------------

  // Occupancy floors (__launch_bounds__) in 4-warp blocks per SM: 6 = 80 registers, 7 = 72, 8 = 64.
  // No SR: 6 (they spill at 64 registers).
  // perf-notes: build-time tuning knobs (2026-12-02: the live configuration in csrc/tuning.h).
  static constexpr int kNoSrBlocks = 6;
  // 5 rounds: 7 (8 slower at 128 heads x 256, 6 slower for simple).
  // perf-notes: the SR chunk path, longer warps, occupancy, waves; uniform key, profiler stall
  // reasons, pipe rebalances, FTZ flush (2026-11-30).
  static constexpr int kR5SimpleBlocks = 7;
  static constexpr int kR5VerticalBlocks = 7;
  // 10 rounds, 2- and 4-row kernels: 8, no spills with the key in uniform registers (6, 7 slower).
  // perf-notes: uniform key, profiler stall reasons, pipe rebalances, FTZ flush; L2 prefetch,
  // pipe-neutral SR forms, zero page, rows per warp (2026-11-30).
  static constexpr int kR10Blocks = 8;
  // 10 rounds simple, large-grid form: 8 (7 within the spread, 6 slower).
  // perf-notes: 2-row chunks on small grids, occupancy of the large R=10 form (2026-11-30);
  // energy per call (2026-12-01).
  static constexpr int kR10LargeBlocks = 8;
  // 10 rounds, one-row kernels: 6 (8 with a block-wide key table slower at 32 heads x 1).
  // perf-notes: uniform key, profiler stall reasons, pipe rebalances, FTZ flush (2026-11-30).
  static constexpr int kR10OneRowBlocks = 6;
  // Warps per block of the 2-row no-SR kernels (32 heads x 1): half the blocks (16, 32 slower).
  // perf-notes: 8-warp blocks at 32 × 1, three R=10 simple reshuffles (2026-11-30).
  static constexpr int kSmallNoSrBlockWarps = 8;

  // Per-kernel code forms, each where it measured faster.
  // Low-side flush by HMUL2.FTZ: all but the 10-round vertical kernel (it spills with it).
  // perf-notes: uniform key, profiler stall reasons, pipe rebalances, FTZ flush (2026-11-30).
  static constexpr bool ftz_flush(HotKernel k) { return !(k.rounds == 10 && !k.simple); }
  // Random add by mad.hi: R=10 simple and R=5 vertical (R=5 simple slower, R=10 vertical equal).
  // perf-notes: L2 prefetch, pipe-neutral SR forms, zero page, rows per warp (2026-11-30);
  // energy per call (2026-12-01).
  static constexpr bool madhi_add(HotKernel k) { return (k.rounds == 10) == k.simple; }
  // High-side check by a half-precision accumulator: R=10 vertical only (slower elsewhere).
  // perf-notes: L2 prefetch, pipe-neutral SR forms, zero page, rows per warp; 8-warp blocks at
  // 32 × 1, three R=10 simple reshuffles (2026-11-30); energy per call (2026-12-01).
  static constexpr bool half_acc(HotKernel k) { return k.rounds == 10 && !k.simple; }
  // Pad reads from the zero page: R=5 vertical, 4-row R=5 simple, large-grid 4-row R=10 forms.
  // perf-notes: L2 prefetch, pipe-neutral SR forms, zero page, rows per warp (2026-11-30); the
  // chunk's overhead instructions (2026-12-01).
  static constexpr bool zero_page(HotKernel k) {
    return k.rounds > 0 && ((k.rounds == 5 && !k.simple) ||
                            (k.rows == 4 && (k.rounds == 5 || (k.rounds == 10 && k.zw == 1))));
  }
  // Vector x load (and output pointer): all but the no-SR large-grid and R=10 vertical small-grid
  // 4-row forms (slower there). perf-notes: the chunk's overhead instructions (2026-12-01).
  static constexpr bool vec_x(HotKernel k) {
    return k.rounds == 0 ? k.zw != 1 : !(k.rounds == 10 && !k.simple && k.rows == 4 && k.zw != 1);
  }
  // One bulk L2 prefetch of a warp's later rows: the no-SR kernels (slower with SR).
  // perf-notes: L2 prefetch, pipe-neutral SR forms, zero page, rows per warp (2026-11-30).
  static constexpr bool l2_prefetch(HotKernel k) { return k.rounds == 0; }
  // An fp32 state (states::F32State) with rows of 512 bytes or more (dstate 128, 256): that
  // prefetch only for calls whose state (batch x heads x dim x dstate x 4 bytes) is at most this
  // many bytes; above it prefetched rows were read from DRAM twice (0.87-0.98 of the time
  // without it from 80 MiB on; 256-byte rows, dstate 64, keep it: 0.97-1.05 either way).
  // perf-notes: an fp32 state's L2 prefetch (2026-12-06).
  static constexpr int64_t kF32PrefetchMaxStateBytes = int64_t{48} << 20;
  // Tapered grid (kTaperShift, kTaperPct): the large-grid 4-row 10-round forms (5 rounds: no gain).
  // perf-notes: the power cap, tapered grids (2026-12-01).
  static constexpr bool taper(HotKernel k) { return k.rows == 4 && k.rounds == 10 && k.zw == 1; }
  // State loads without L1 allocation: the large-grid 10-round simple kernel without z (less
  // energy per call; the others not measured).
  // perf-notes: the power cap, tapered grids; energy per call (2026-12-01).
  static constexpr bool ld_no_allocate(HotKernel k) {
    return taper(k) && k.simple && zero_page(k) && !k.gate;
  }

  // ---- Multi-token SSU (ssu_mtp.cu, ssu_mtp.cuh) ----------------------------------------------

  // Two rows per group from this many (sequence, head) pairs (below: one row, twice the warps).
  // perf-notes: the multi-token kernel (2026-12-01).
  static constexpr int64_t kMtpTwoRowPairs = 1024;
  // No SR: four rows per group from this many pairs (64 rows written token by token; SR slower).
  // perf-notes: the write roofline of the multi-token SSU (2026-12-02).
  static constexpr int64_t kMtpFourRowPairs = 4096;
  // Occupancy floors (__launch_bounds__) in 4-warp blocks per SM: one-row kernels 8 without SR,
  // 4 with SR; two-row kernels 5 / 4 (other floors slower or equal).
  // perf-notes: the multi-token kernel; the multi-token kernel's latency, store backpressure
  // (2026-12-01).
  static constexpr int kMtpBlocks = 8;
  static constexpr int kMtpSrBlocks = 4;
  static constexpr int kMtpTwoRowBlocks = 5;
  static constexpr int kMtpTwoRowSrBlocks = 4;
  // Four-row kernels: 3 (4 spills and was slower, 2 equal).
  // perf-notes: the write roofline of the multi-token SSU; the goal's figure, per-warp bulk
  // stores, store operators (2026-12-02).
  static constexpr int kMtpFourRowBlocks = 3;
  // Small-grid one-row kernels (branch-free token loop): grids of at most this many blocks per
  // SM, which is also their floor. perf-notes: the multi-token kernel's latency, store
  // backpressure (2026-12-01).
  static constexpr int kMtpSmallBlocks = 4;
  // Their token loop unrolled by 2, so that consecutive tokens overlap (4: no better).
  // perf-notes: the multi-token kernel's latency, store backpressure (2026-12-01).
  static constexpr int kMtpSmallUnroll = 2;
  // One-row hot kernels stage B and C as bf16 bits (as fp32 slower); wider groups stage fp32.
  // perf-notes: the multi-token kernel; the multi-token kernel's latency, store backpressure
  // (2026-12-01).
  static constexpr bool kMtpOneRowBf16Stage = true;

  // The compiled-in multi-token kernels at dstate 64 take the dstate-128 floors above (half the
  // registers: none spills). At dstate 256 a lane holds 32 columns per row: the floors below are
  // the highest without spills (ptxas, CUDA 13.0, sm_90; one more block spills), not timed.
  // One row: 5 without SR (93 registers), 2 with SR (about 205); small-grid kernels 3 / 2 (151 /
  // 209, also their grid threshold); two rows 3 / 2 (164 / 255).
  static constexpr int kMtpDs256Blocks = 5;
  static constexpr int kMtpDs256SrBlocks = 2;
  static constexpr int kMtpDs256SmallBlocks = 3;
  static constexpr int kMtpDs256SmallSrBlocks = 2;
  static constexpr int kMtpDs256TwoRowBlocks = 3;
  static constexpr int kMtpDs256TwoRowSrBlocks = 2;
  // Rows per group at dstate 256: at most two (a block's 32 rows then write 16 KiB per token,
  // what four rows write at dstate 128; four rows would need all 255 registers: 2 blocks).
  static constexpr int kMtpDs256MaxRows = 2;
  // Hot multi-token calls whose blocks leave the last pass of row groups part-empty (head dim
  // 80): 0 keeps the plan above; 1 runs them without SR as one-row groups on blocks of 16 rows
  // (ssu_mtp.cu, plan_launch); 2 does so with and without SR. Host code only. 1: without SR
  // the full passes took 0.92-0.99 of the time at head dim 80, with SR 1.06-1.21 (the
  // multi-token plan at head dim 80, docs/perf-notes.md, 2026-12-06).
  static constexpr int kMtpFullPasses = 1;
  // Hot multi-token calls with SR and two rows per group whose blocks leave the last pass
  // part-empty (head dim 80: two 40-row blocks per (sequence, head), each a full and a quarter
  // pass), at dstates 64 and 256: 0 keeps the plan above; 1 takes the rows per block (one to
  // four blocks per (sequence, head), at most kMtpPassesMaxRows rows) with the fewest row-group
  // passes per (sequence, head), the fewest blocks among equals (head dim 80: one block of 80
  // rows, three passes). Host code only. 1: 0.90-0.99 of the time at head dim 80 and dstates 64
  // and 256; at dstate 128 0.97-1.02 (5 rounds slower in 6 of 7 cells), so dstate 128 keeps
  // the plan above; the most blocks among equals (three 27-row blocks) 0.98-1.14 (the
  // multi-token SR plan at head dim 80: fewest passes, docs/perf-notes.md, 2026-12-06).
  static constexpr int kMtpSrPasses = 1;
  // The most rows a block of that plan takes (x and z of every row and token are staged in
  // shared memory; the default plan's blocks take at most 64).
  static constexpr int kMtpPassesMaxRows = 128;
};

// The configuration of this build.
#if defined(MAMBA_SSU_RPW_WARPS_PER_SM) || defined(MAMBA_SSU_MTP_FULL_PASSES) || \
    defined(MAMBA_SSU_MTP_SR_PASSES)
// The build-time overrides of the planning (see the top of this file).
struct Tuning : Sm90 {
#ifdef MAMBA_SSU_RPW_WARPS_PER_SM
  static constexpr int kRpwWarpsPerSm = MAMBA_SSU_RPW_WARPS_PER_SM;
#endif
#ifdef MAMBA_SSU_MTP_FULL_PASSES
  static constexpr int kMtpFullPasses = MAMBA_SSU_MTP_FULL_PASSES;
#endif
#ifdef MAMBA_SSU_MTP_SR_PASSES
  static constexpr int kMtpSrPasses = MAMBA_SSU_MTP_SR_PASSES;
#endif
};
#else
using Tuning = Sm90;
#endif
static_assert(Tuning::kRpwWarpsPerSm >= 1, "MAMBA_SSU_RPW_WARPS_PER_SM: expected >= 1");

}  // namespace tuning
}  // namespace mamba_ssu
