// ssu.cuh — the single-token selective-state-update kernel (FlashInfer 0.7.2
// compatible, bit for bit), as templated device code: the kernel's arguments (Args), the
// configs (HotConfig, DynConfig: sizes, a lane's columns, its state, input and output
// accesses, its Philox key; the hot kernels' measured choices from tuning.h), the row
// reduction in FlashInfer's tree order (reduce_rows), the chunk loads, the fused seed
// (derive_seed), the body (ssu_body) and the kernel template (ssu_kernel). Included by ssu.cu
// (host: validation, dispatch and the instantiations); a second SSU kernel includes it for the
// configs and the row helpers.
// Built on fp32_ops.cuh (FlashInfer's fp32 operations), sr.cuh (the stochastic-rounding
// conversion), philox_words.cuh (which random words each element takes; the rounds are in
// philox.cuh) and loads.cuh (vector loads and stores, cache operators, dtype conversions).
//
// Work layout
// -----------
// One warp per state row (b, h, d): the 32 lanes are FlashInfer's 32 virtual
// lanes, so lane l owns exactly the columns FlashInfer's lane l owns, and the
// per-lane partial sums, the shuffle-down tree and the Philox counters follow
// from that without any data exchange. Blocks are 4 warps (128 threads); a
// block serves one (b, h) and 4 * rows_per_warp consecutive rows of it, each
// warp a contiguous run of rows_per_warp rows (the host picks a multiple of
// the chunk size up to 16, more when there is more work, see ssu.cu; the SR
// hot kernels on large grids take 32 rows per warp in blocks of 2 warps, so a
// block still serves one (b, h) and its indices stay block-uniform). Why:
//   - everything per (b, h) — the slot indices, dt', dA, the seed, B*dt' and
//     C for the lane's columns — is loaded/computed once per warp and
//     amortised over its rows;
//   - a warp walks its rows in chunks of kRowsPerChunk rows and issues the
//     loads of the next chunk (state, x, z) before computing the current one,
//     so every warp keeps 2 chunks of state in flight (memory-level
//     parallelism without shared memory or barriers); the hot kernels without
//     SR also ask L2 for the warp's later rows with one bulk prefetch at its
//     start (Cfg::kL2Prefetch), which doubles the bytes in flight per SM (an fp32
//     state's kernels only for calls the launcher picks: Args::l2_prefetch);
//   - the rows of a chunk are reduced together (reduce_rows): 4 rows cost 6
//     shuffles instead of 20, and the gate and the output store run once per
//     chunk on 4 lanes instead of once per row;
//   - the state stays in its packed storage form in registers until it is
//     used (2 words per row and lane for the fp16 / dstate 128 hot path), so
//     the prefetch buffer is cheap;
//   - warps are independent except for one block barrier in the 4-row SR
//     kernels (the block's Philox key table, make_key) and, on large grids, in
//     the fused seed's derivation (derive_seed).
// With stochastic rounding the kernel is bound by instruction issue (Philox
// multiplies and the SR bit manipulation), so those paths are written to
// keep the instruction count low: the Philox key schedule is computed once
// per block (4-row kernels, whose key words then live in uniform registers)
// or per warp; in the hot kernels the lane's counters share their high word
// over the warp's rows, so round 2's first product is computed once per warp
// (Cfg::round_two); a pair of elements is rounded by one cvt.rz.f16x2.f32,
// a half-precision multiply with flush-to-zero (or a compare and mask) that
// zeroes results below 2^-14 without a branch, and a running maximum or a
// half-precision accumulator that turns non-finite (sr_pair_fast_low, with the
// per-kernel choices of HotConfig); a chunk with a saturated,
// Inf or NaN result is converted again with the exact integer formula
// (sr_fp16_magnitude, 9 instructions per element). The generic kernel and
// the one-row hot kernels test each row's pairs (sr_pair_fast) and convert a
// flagged row exactly.
// Each lane reads its state elements before it writes them, and the rows a
// warp reads from the read slot are written to the write slot by the same
// lane, so a call whose read and write slots coincide is race-free. As in
// FlashInfer, a write slot of one batch entry that is the read slot of another
// batch entry is a caller error (blocks run in any order).
//
// Numerics: every fp32 operation is pinned (__fmul_rn, __fadd_rn, __fmaf_rn;
// the build flushes subnormals with -ftz=true) and ex2 / lg2 / rcp are the
// approximate PTX instructions, which is what FlashInfer's -use_fast_math
// build executes. FlashInfer's operations, one rounding each (rn): dt' = rn(dt + dt_bias),
// then softplus when enabled and dt' <= 20 (fp32_ops.cuh); dA = ex2(rn(rn(A * dt') * L2E));
// s' = fma(dA, s, rn(x * rn(B * dt'))); y = the lane partials, whose first accumulate takes
// form F0, fma(sel, rn(D * x), rn(C * s')), or F1, fma(C, s', rn(sel * rn(D * x))) (sel = 1 on
// lane 0, else 0), then fma(C, s', acc) in the lane's column order, summed by the shuffle-down
// tree; gated by z (fp32_ops.cuh: gate) and rounded to nearest into out. The stochastic-rounding
// (SR) conversion is described in sr.cuh, the Philox-to-column mapping in philox_words.cuh.
//
// The body is written once (ssu_body) over a config type:
//   - HotConfig<kSimple, kRounds, kU, kGate, kZW>: fp16 state, bf16 inputs and weights, dim 64,
//     dstate 128, all sizes constexpr, vector loads;
//   - HotDimConfig<...>: HotConfig's kernels with head_dim at run time (multiples of 16 up to
//     256: Nemotron Nano 2's 80, 128);
//   - DynConfig: every dtype, dim, dstate and round count at run time, scalar
//     loads, per-lane arrays sized for dstate 256 with guarded unrolled loops.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include "fp32_ops.cuh"
#include "include/mamba_ssu.h"
#include "loads.cuh"
#include "philox.cuh"
#include "philox_words.cuh"
#include "sr.cuh"
#include "tuning.h"

namespace mamba_ssu {
namespace ssu {

using tuning::Tuning;

constexpr int kWarpsPerBlock = 4;
constexpr int kThreadsPerBlock = 32 * kWarpsPerBlock;
constexpr unsigned kFullMask = 0xffffffffu;

// Everything the kernel reads, filled and validated by the host launcher.
// Strides in elements; pointers as given in mamba_ssu_params.
struct Args {
  const void *x;
  const void *dt;
  const void *dt_bias; // optional
  const float *A;
  const void *B;
  const void *C;
  const void *D; // optional
  const void *z; // optional
  void *out;
  void *state;
  const void *state_batch_indices;     // optional
  const void *dst_state_batch_indices; // optional
  const int64_t *rand_seed;
  // The device generator state, when the seed position comes from device memory (fused seeds
  // under capture, a fused chain's next link): its seed here, its offset in gen_offset (kept
  // last, see there). Either a mamba_ssu_generator_state's two fields or torch's pair of
  // separate device int64 values. nullptr: the position is (generator_seed, seed_offset).
  const uint64_t *gen_seed;
  uint64_t seed_offset;
  uint64_t generator_seed;

  int64_t state_stride_batch;
  int64_t x_stride_batch;
  int64_t dt_stride_batch;
  int64_t B_stride_batch;
  int64_t C_stride_batch;
  int64_t z_stride_batch;
  int64_t out_stride_batch;
  int64_t state_batch_indices_stride;
  int64_t dst_state_batch_indices_stride;
  int64_t pad_slot_id;
  int64_t state_cache_size;

  uint32_t nheads;
  uint32_t heads_per_group;  // nheads / ngroups
  uint32_t blocks_per_head;  // blocks per (b, h)
  // Division by blocks_per_head and by nheads as a multiply-high and a shift (numerators
  // below 2^31): q = (umulhi(n, magic) + n) >> shift. Set by the launcher (make_divider).
  uint32_t bph_magic, bph_shift;
  uint32_t nheads_magic, nheads_shift;
  int32_t rows_per_warp;     // a multiple of the config's kRowsPerChunk
  int32_t dim;               // read by DynConfig only
  int32_t dstate;            // read by DynConfig only
  int32_t philox_rounds;     // read by DynConfig only
  int32_t simple;            // layout, read by DynConfig; RowForms: the update form too
  int32_t first_form_f1;     // 1: lane partials start with form F1, 0: F0 (DynUnevenI16Config:
                             // bit 0 rows that are not pads, bit 1 pad rows; RowForms: bits 0-1
                             // and 2-3, 0 F0, 1 F1, 2 F2)
  int32_t state_dtype;       // read by DynConfig only
  int32_t input_dtype;       // read by DynConfig only
  int32_t weight_dtype;      // read by DynConfig only
  int32_t index_dtype;
  int32_t dt_softplus;
  int32_t update_state;
  int32_t seed_source;
  int32_t block_seed;        // fused seeds: derived once per block (1) or per warp (0)
  int64_t *seed_next;        // optional: the extra first block (block 0) stores the next call's seed
  // A tapered grid's tail (HotConfig::kTaper kernels, grids of one block per head): blocks from
  // taper_start on serve 1 / 2^taper_shift of a head each, in warps of rows_per_warp >>
  // taper_shift rows (taper_start = UINT32_MAX: no taper).
  uint32_t taper_start;
  uint32_t taper_shift;
  // The generator state's offset (with gen_seed). Appended after the fields above, so that
  // adding it left the offsets of every other argument unchanged.
  const uint64_t *gen_offset;
  // The stochastic-rounding conversion (mamba_ssu_sr_rule), read by DynConfig only: the hot
  // kernels implement FlashInfer 0.7.2's and are never launched for MAMBA_SSU_SR_V074 with SR.
  // Last, like gen_offset.
  int32_t sr_rule;
  // Whether a kernel whose config takes the choice at run time (kL2PrefetchAtRunTime: an fp32
  // state's, states::F32State) issues its bulk L2 prefetch (kL2Prefetch); the launcher's choice
  // (ssu.cu: l2_prefetch). In the padding after sr_rule: the size of Args and the offsets of
  // every other argument are unchanged.
  int32_t l2_prefetch;
};
static_assert(offsetof(Args, l2_prefetch) == offsetof(Args, sr_rule) + sizeof(int32_t) &&
                  sizeof(Args) == offsetof(Args, gen_offset) + sizeof(void *) + 2 * sizeof(int32_t),
              "Args: l2_prefetch fills the padding after sr_rule (the other offsets and the size "
              "as before it)");

// An int16 state's decode scales (ssu_kernel_scaled, DynI16Config): element (slot, h, d) at
// state_scale[slot * slot_stride + h * dim + d]; nullptr: an int16 state without scales. A kernel
// argument of their own, so that Args (every other kernel's parameter block) is unchanged.
struct ScaleArgs {
  float *state_scale;
  int64_t slot_stride;
};

// ---------------------------------------------------------------------------
// Configs
// ---------------------------------------------------------------------------
//
// A config provides (constexpr where it can):
//   kMaxCols, kRowsPerChunk, Raw (a row's packed storage for one lane);
//   dim(), dstate(), ncols() (= dstate / 32), rounds(), sr_group() (columns
//   per Philox call), run() (contiguous columns per lane run: lane l owns
//   columns l*run + 32*run*(i / run) + i % run, i = 0..ncols-1);
//   kFullChunks (every warp has rows_per_warp rows, all chunks full);
//   state_bytes(); load_state / state_value / store_state (state element
//   bits in the low bits of a u32) / round_nearest; load_cols (B, C);
//   load_input / load_weight / store_out; Key, make_key(seed), philox(c, key).
// The hot kernels' measured choices (occupancy floors, code forms) are tuning.h's.

// The Philox key table of Owner's kernels in shared memory (philox_words.cuh: KeySchedule),
// kRounds rounds (kKeyRounds = max(kRounds, 1) words each), one per block (kBlockKey) or one per
// warp: table() the lane's table, make(seed) fills it (every thread of the block, or of the warp,
// calls it) and returns the key, load() reads it back. The table is a static of this template,
// so every Owner has its own: a config derived from another (HotDimConfig from HotConfig,
// F16Inputs from either) leaves the base's kernels' shared-memory layout in the linked module
// as it was.
template <class Owner, int kKeyRounds, int kRounds, bool kBlockKey>
struct OwnKeyTable {
  using Key = KeySchedule<kKeyRounds>;
  __device__ static uint32_t *table() {
    if constexpr (kBlockKey) {
      __shared__ uint32_t schedule[2 * kKeyRounds];
      return schedule;
    } else {
      __shared__ uint32_t schedule[kWarpsPerBlock][2 * kKeyRounds];
      return schedule[threadIdx.x >> 5];
    }
  }
  __device__ static Key load() { return load_key_schedule<kKeyRounds>(table()); }
  __device__ static Key make(uint64_t seed) {
    if constexpr (kRounds == 0) return Key{};  // no stochastic rounding
    // Every thread of the block calls this (full chunks: no warp has returned; the seed is
    // block-uniform), so a block barrier is reached by all.
    uint32_t *t = table();
    const int i = kBlockKey ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x & 31);
    store_key_schedule<kKeyRounds>(t, i, seed);
    if constexpr (kBlockKey) {
      __syncthreads();
    } else {
      __syncwarp();
    }
    return load();
  }
};

// Hot path: fp16 state, bf16 x/z/B/C/out and dt/D/dt_bias, dim 64, dstate 128.
// A row of one lane is 4 two-byte elements, held as 2 words: element i in
// bits 16*(i%2) of word i/2. Simple: columns 4l..4l+3, one 8-byte access.
// Vertical: columns 2l, 2l+1, 64+2l, 65+2l, two 4-byte accesses.
template <bool kSimple, int kRounds, int kU = 4, bool kGate = false, int kZW = -1>
struct HotConfig {
  static_assert(kU == 1 || kU == 2 || kU == 4, "rows per chunk: 1, 2 or 4");
  static constexpr bool kSimpleLayout = kSimple;
  static constexpr bool kRunWords = false;  // run_words
  static constexpr int kMaxCols = 4;
  // 4 rows per chunk; 1 or 2 for small grids (see small_grid_rows in ssu.cu), where a warp's
  // serial work per row, not the number of loads in flight, sets the time.
  static constexpr int kRowsPerChunk = kU;
  // dim 64 is a multiple of 4 warps x rows_per_warp (4, 8 or 16).
  static constexpr bool kFullChunks = true;
  // This kernel as tuning.h's per-kernel choices see it.
  static constexpr tuning::HotKernel kKernel{kSimple, kRounds, kU, kGate, kZW};
  // Warps per block: 4, except the 2-row kernels without SR (tiny grids only, see small_grid_rows
  // in ssu.cu).
  static constexpr int kBlockWarps =
      kU == 2 && kRounds == 0 ? Tuning::kSmallNoSrBlockWarps : kWarpsPerBlock;
  // Occupancy floor in 4-warp blocks (tuning.h).
  static constexpr int kMinBlocksPerSM =
      kRounds == 5    ? (kSimple ? Tuning::kR5SimpleBlocks : Tuning::kR5VerticalBlocks)
      : kRounds == 10 ? (kU > 1 ? (kZW == 1 ? Tuning::kR10LargeBlocks : Tuning::kR10Blocks)
                                : Tuning::kR10OneRowBlocks)
                      : Tuning::kNoSrBlocks;
  // Chunks zero-initialised before their loads, rows stored at d * row bytes from the head: the
  // code generation that measured fastest for the kernels without SR (per-chunk bases and
  // pad-only zeroing are faster with SR; perf-notes: what the profiler and a micro-benchmark
  // said (2026-11-30)).
  static constexpr bool kZeroChunks = kRounds == 0;
  // The first accumulate form when it is a compile-time fact: with SR, F0 for simple and F1
  // for vertical (the launcher's rule); -1: read Args::first_form_f1.
  static constexpr int kFirstForm = kRounds > 0 ? (kSimple ? 0 : 1) : -1;
  // Whether z is given, a compile-time fact (the launcher picks the instantiation): without z the
  // loop carries no z loads, their predicates nor the gate's branch (faster; perf-notes: z as a
  // compile-time fact, pad zeroing, launch floor (2026-11-30)). Engines' Mamba-2 mixers call the
  // SSU without z (the gate is applied by the following gated RMSNorm).
  static constexpr int kZ = kGate ? 1 : 0;
  // A pad chunk's state zeroed word by word (see load_chunk) rather than by `= {}`, which ptxas
  // compiles into loads of a zero constant: faster for the SR kernels except the 10-round 4-row
  // ones on small grids, so the 10-round simple one has both forms, chosen by grid size (kZW, set
  // by the launcher; -1: this rule). perf-notes: z as a compile-time fact, pad zeroing, launch
  // floor (2026-11-30).
  static constexpr bool kZeroWords =
      kZW >= 0 ? kZW != 0 : !(kRounds == 10 && !kSimple && kU > 1);
  struct Raw {
    uint32_t w[2];
  };

  __device__ explicit HotConfig(const Args &) {}

  __device__ static constexpr int dim() { return 64; }
  __device__ static constexpr int dstate() { return 128; }
  __device__ static constexpr int ncols() { return 4; }
  __device__ static constexpr int rounds() { return kRounds; }
  __device__ static constexpr int sr_group() { return kSimple ? 4 : 2; }
  __device__ static constexpr int run() { return kSimple ? 4 : 2; }
  __device__ static constexpr int state_bytes() { return 2; }
  __device__ static constexpr int input_bytes() { return 2; }
  __device__ static constexpr int col(int lane, int i) {
    return lane * run() + 32 * run() * (i / run()) + i % run();
  }

  // Two-byte elements of the lane's 4 columns of a 128-column row.
  __device__ static void load_pairs(const void *row, int lane, Raw &r) {
    const char *p = static_cast<const char *>(row);
    if (kSimple) {
      const uint2 v = load_u32x2(p + 8 * lane);
      r.w[0] = v.x;
      r.w[1] = v.y;
    } else {
      r.w[0] = load_u32(p + 4 * lane);
      r.w[1] = load_u32(p + 128 + 4 * lane);
    }
  }
  __device__ static uint32_t pair_elem(const Raw &r, int i) {
    return (r.w[i / 2] >> (16 * (i % 2))) & 0xffffu;
  }

  __device__ static void load_state(const void *row, int lane, Raw &r) { load_pairs(row, lane, r); }
  __device__ static float state_value(const Raw &r, int i) {
    return half_bits_to_float(pair_elem(r, i));
  }
  // State stores are streaming (st.global.cs: L2 evict-first): a slot's state is read again only at
  // the next decode step, after every other layer has gone through L2, so it should not displace
  // lines that are reused sooner; faster on small grids and in the decode step (perf-notes: the
  // Philox high products on the FP64 pipe, streaming state stores (2026-11-30)). The output y
  // keeps default stores (the next kernel reads it).
  __device__ static void store_state(void *row, int lane, const uint32_t (&bits)[kMaxCols]) {
    char *p = static_cast<char *>(row);
    const uint32_t w0 = bits[0] | (bits[1] << 16);
    const uint32_t w1 = bits[2] | (bits[3] << 16);
    if (kSimple) {
      store_cs_u32x2(p + 8 * lane, w0, w1);
    } else {
      store_cs_u32(p + 4 * lane, w0);
      store_cs_u32(p + 128 + 4 * lane, w1);
    }
  }
  __device__ static uint32_t round_nearest(float v) { return float_to_half_bits_rn(v); }

  // B or C (bf16) at the lane's columns of a 128-column row.
  __device__ static void load_cols(const void *row, int lane, float (&v)[kMaxCols]) {
    Raw r;
    load_pairs(row, lane, r);
#pragma unroll
    for (int i = 0; i < kMaxCols; ++i) v[i] = bf16_bits_to_float(pair_elem(r, i));
  }

  __device__ static float load_input(const void *p, int64_t idx) {
    return bf16_bits_to_float(static_cast<const unsigned short *>(p)[idx]);
  }
  // x of a chunk's kU rows (idx = the first one's element index) in one load of 2 * kU bytes:
  // the launcher checked x's base and batch stride for 16-byte alignment, dim is 64 and a
  // chunk starts at a multiple of kU, so the address is aligned.
  template <class I>
  __device__ static void load_x(const void *p, I idx, float (&x)[kU]) {
    const unsigned short *q = static_cast<const unsigned short *>(p) + idx;
    if constexpr (kU == 4) {
      const uint2 v = load_u32x2(q);
      x[0] = __uint_as_float(v.x << 16);
      x[1] = __uint_as_float(v.x & 0xffff0000u);
      x[2] = __uint_as_float(v.y << 16);
      x[3] = __uint_as_float(v.y & 0xffff0000u);
    } else if constexpr (kU == 2) {
      const uint32_t v = load_u32(q);
      x[0] = __uint_as_float(v << 16);
      x[1] = __uint_as_float(v & 0xffff0000u);
    } else {
      x[0] = bf16_bits_to_float(*q);
    }
  }
  __device__ static float load_weight(const void *p, int64_t idx) { return load_input(p, idx); }
  template <class I>
  __device__ static void store_out(void *p, I idx, float v) {
    static_cast<unsigned short *>(p)[idx] = static_cast<unsigned short>(float_to_bf16_bits_rn(v));
  }

  // The Philox key schedule, computed once per block and read back through volatile shared loads
  // (philox_words.cuh: KeySchedule). The 4-row kernels' table is one per block (a block serves one
  // (b, h), so every warp of it has the same seed) at a fixed shared address: loads at a uniform
  // address let the compiler keep the key words in uniform registers, which frees 2 * rounds vector
  // registers per thread (the 10-round kernels run at 64 registers without spilling, and their
  // rows' Philox chains interleave).
  static constexpr int kKeyRounds = kRounds > 0 ? kRounds : 1;
  using Key = KeySchedule<kKeyRounds>;
  // The one-row kernels (tiny grids with SR, one latency chain) keep a table per warp: no block
  // barrier in front of their first Philox round.
  static constexpr bool kBlockKey = kU > 1;
  using KeyTable = OwnKeyTable<HotConfig, kKeyRounds, kRounds, kBlockKey>;
  // The key from the block's table (make_key filled it). Also called by the exact SR path, so
  // that key words the fast path does not use need not stay in registers.
  __device__ static Key load_key() { return KeyTable::load(); }
  __device__ static Key make_key(uint64_t seed) { return KeyTable::make(seed); }
  __device__ static U32x4 philox(U32x4 c, const Key &k) { return philox_scheduled<kRounds>(c, k); }

  // The fast SR path (the kFastSr branch of ssu_body): the lane's counters over the warp's rows
  // share their high word, so round 2's first product is computed once per warp (round_two;
  // philox_words.cuh: philox_round_two), each call from its low word (philox_lo). Only for
  // 4-row chunks: the one-row kernels (tiny grids, latency-bound) keep the per-row path.
  static constexpr bool kFastSr = kRounds >= 2 && kU > 1;
  // The fast path's low-side flush by HMUL2.FTZ (else a compare and a mask), the random add by
  // mad.hi (sr_add13) and the half-precision accumulator for the high side (sr_pair_fast_low):
  // per kernel, tuning.h.
  static constexpr bool kFtzFlush = Tuning::ftz_flush(kKernel);
  static constexpr bool kMadHiAdd = Tuning::madhi_add(kKernel);
  static constexpr bool kHalfAcc = Tuning::half_acc(kKernel);
  // Pad reads from zero_page (unconditional state loads, fewer instructions per chunk) in the
  // SR kernels that measured faster with them (tuning.h).
  static constexpr bool kZeroPage = Tuning::zero_page(kKernel);
  // A chunk's x in one vector load (load_x) and, without z, the output stored through a per-lane
  // pointer bumped per chunk (ssu_body), where faster (tuning.h): the no-SR 4-row kernels on small
  // grids only and the 4-row R=10 vertical one on large grids only (kZW, chosen by the launcher
  // at Tuning::kLargeGridRows).
  static constexpr bool kVecX = Tuning::vec_x(kKernel);
  // A tapered grid (Args::taper_start, set by the launcher): the large-grid 4-row 10-round
  // kernels, whose warps take up to a whole head (tuning.h).
  static constexpr bool kTaper = Tuning::taper(kKernel);
  // L2 prefetch of a warp's rows after its first two chunks, one bulk prefetch at its start
  // (ssu_body): the kernels without SR (tuning.h).
  static constexpr bool kL2Prefetch = Tuning::l2_prefetch(kKernel);
  // Whether Args::l2_prefetch may turn that prefetch off (a wrapper's choice: F32State).
  static constexpr bool kL2PrefetchAtRunTime = false;
  // State loads without L1 allocation (load_chunk): the large-grid 10-round simple kernel
  // without z (tuning.h).
  static constexpr bool kLdNoAllocate = Tuning::ld_no_allocate(kKernel);
  using RoundTwo = PhiloxRoundTwo;
  __device__ static RoundTwo round_two(uint32_t hi, const Key &k) {
    return philox_round_two<kRounds>(hi, k);
  }
  __device__ static U32x4 philox_lo(uint32_t lo, const Key &k, const RoundTwo &t) {
    return philox_from_lo<kRounds>(lo, k, t);
  }
};

// The hot kernels at another head_dim: HotConfig's code with the head_dim read from Args::dim
// (a multiple of 16 up to 256 other than 64; the launcher's is_hot_dim). Every other size,
// layout and tuning choice is HotConfig's. The launcher gives each warp rows_per_warp rows
// dividing dim, in blocks of Cfg::kBlockWarps warps (or one block of fewer warps per head), so
// that every chunk is full and a block's first warp index is its index in the head times
// kBlockWarps, as at dim 64 (plan_launch: snap_rows_per_warp).
// Its shared key table and its zero page are its own (OwnKeyTable, zero_page below), so that the
// dim-64 kernels' shared-memory and global layout in the linked module stays as it was.
template <bool kSimple, int kRounds, int kU = 4, bool kGate = false, int kZW = -1>
struct HotDimConfig : HotConfig<kSimple, kRounds, kU, kGate, kZW> {
  using Base = HotConfig<kSimple, kRounds, kU, kGate, kZW>;
  using Key = typename Base::Key;
  int dim_;
  __device__ explicit HotDimConfig(const Args &a) : Base(a), dim_(a.dim) {}
  __device__ int dim() const { return dim_; }

  // HotConfig's make_key and load_key over a key table of this config's own.
  using KeyTable = OwnKeyTable<HotDimConfig, Base::kKeyRounds, kRounds, Base::kBlockKey>;
  __device__ static Key load_key() { return KeyTable::load(); }
  __device__ static Key make_key(uint64_t seed) { return KeyTable::make(seed); }
};

// Whether Cfg is a HotDimConfig (its zero page is zero_page_wide).
template <class Cfg>
struct IsHotDim : std::false_type {};
template <bool kSimple, int kRounds, int kU, bool kGate, int kZW>
struct IsHotDim<HotDimConfig<kSimple, kRounds, kU, kGate, kZW>> : std::true_type {};

// The hot kernels at dstate 64 and 256: HotDimConfig's code (the head dim at run time) over
// state rows of kDs columns. A lane holds kDs / 32 columns of a row in FlashInfer's layouts
// (as DynConfig maps them): simple, runs of min(8, kDs / 32) contiguous columns (one 4- or
// 16-byte access); vertical, runs of 2 (4-byte accesses 128 bytes apart). Columns per Philox
// call: simple min(4, kDs / 32), vertical 2. The dstate-128 code forms that assume 256-byte
// rows are off: the zero page (pads zeroed in registers), the no-allocate loads and the tapered
// grid (plan_launch in ssu.cu tapers dstate 128 only). kZW is ignored (the launcher's grid-size
// forms map to one kernel: HotDs). With 8 columns per lane the dstate-256 kernels take half
// the occupancy floor (twice the registers per thread).
template <int kDs, bool kSimple, int kRounds, int kU = 4, bool kGate = false>
struct HotDsConfig : HotDimConfig<kSimple, kRounds, kU, kGate, 0> {
  static_assert(kDs == 64 || kDs == 256, "dstate 64 or 256 (128: HotConfig, HotDimConfig)");
  using Base = HotDimConfig<kSimple, kRounds, kU, kGate, 0>;
  static constexpr int kMaxCols = kDs / 32;
  static constexpr int kRun = kSimple ? (kMaxCols < 8 ? kMaxCols : 8) : 2;
  static constexpr int kGroup = kSimple ? (kMaxCols < 4 ? kMaxCols : 4) : 2;
  static constexpr bool kZeroPage = false;
  static constexpr bool kLdNoAllocate = false;
  static constexpr bool kTaper = false;
  static constexpr int kMinBlocksPerSM =
      kDs == 256 ? (Base::kMinBlocksPerSM + 1) / 2 : Base::kMinBlocksPerSM;
  // The first accumulate form with SR (ssu.cu: first_form_f1): simple F0 but F1 at dstate 256
  // with 10 rounds, vertical F1 but F0 at dstate 64.
  static constexpr int kFirstForm =
      kRounds > 0 ? (kSimple ? (kDs == 256 && kRounds == 10 ? 1 : 0) : (kDs == 64 ? 0 : 1)) : -1;
  struct Raw {
    uint32_t w[kMaxCols / 2];
  };

  __device__ explicit HotDsConfig(const Args &a) : Base(a) {}
  __device__ static constexpr int dstate() { return kDs; }
  __device__ static constexpr int ncols() { return kMaxCols; }
  __device__ static constexpr int sr_group() { return kGroup; }
  __device__ static constexpr int run() { return kRun; }
  __device__ static constexpr int col(int lane, int i) {
    return lane * kRun + 32 * kRun * (i / kRun) + i % kRun;
  }

  // Two-byte elements of the lane's kMaxCols columns of a kDs-column row.
  __device__ static void load_pairs(const void *row, int lane, Raw &r) {
    const char *p = static_cast<const char *>(row);
    if constexpr (kRun == 8) {
      const uint4 v = *reinterpret_cast<const uint4 *>(p + 16 * lane);
      r.w[0] = v.x;
      r.w[1] = v.y;
      r.w[2] = v.z;
      r.w[3] = v.w;
    } else {
#pragma unroll
      for (int j = 0; j < kMaxCols / 2; ++j) r.w[j] = load_u32(p + 128 * j + 4 * lane);
    }
  }
  __device__ static uint32_t pair_elem(const Raw &r, int i) {
    return (r.w[i / 2] >> (16 * (i % 2))) & 0xffffu;
  }
  __device__ static void load_state(const void *row, int lane, Raw &r) { load_pairs(row, lane, r); }
  __device__ static float state_value(const Raw &r, int i) {
    return half_bits_to_float(pair_elem(r, i));
  }
  // Streaming stores, as HotConfig::store_state.
  __device__ static void store_state(void *row, int lane, const uint32_t (&bits)[kMaxCols]) {
    char *p = static_cast<char *>(row);
    uint32_t w[kMaxCols / 2];
#pragma unroll
    for (int j = 0; j < kMaxCols / 2; ++j) w[j] = bits[2 * j] | (bits[2 * j + 1] << 16);
    if constexpr (kRun == 8) {
      __stcs(reinterpret_cast<uint4 *>(p + 16 * lane), make_uint4(w[0], w[1], w[2], w[3]));
    } else {
#pragma unroll
      for (int j = 0; j < kMaxCols / 2; ++j) store_cs_u32(p + 128 * j + 4 * lane, w[j]);
    }
  }
  // B or C (bf16) at the lane's columns of a kDs-column row.
  __device__ static void load_cols(const void *row, int lane, float (&v)[kMaxCols]) {
    Raw r;
    load_pairs(row, lane, r);
#pragma unroll
    for (int i = 0; i < kMaxCols; ++i) v[i] = bf16_bits_to_float(pair_elem(r, i));
  }
};

// HotDsConfig as a family of the launcher's five template parameters (ssu.cu: launch_hot_shape).
template <int kDs>
struct HotDs {
  template <bool kSimple, int kRounds, int kU, bool kGate, int kZW>
  using Cfg = HotDsConfig<kDs, kSimple, kRounds, kU, kGate>;
};

// Generic path: everything at run time. A row of one lane is up to 8
// elements, one per word (fp32 bits, or fp16/bf16 bits in the low half).
struct DynConfig {
  static constexpr bool kSimpleLayout = false;  // run time: Args::simple
  static constexpr bool kRunWords = false;      // run_words
  static constexpr int kMaxCols = 8;
  static constexpr int kRowsPerChunk = 2;
  static constexpr bool kFullChunks = false;
  static constexpr bool kZeroPage = false;
  static constexpr bool kVecX = false;
  static constexpr bool kTaper = false;
  static constexpr bool kL2Prefetch = false;
  static constexpr bool kLdNoAllocate = false;
  static constexpr int kMinBlocksPerSM = 4;  // <= 128 registers
  static constexpr int kBlockWarps = kWarpsPerBlock;
  static constexpr bool kZeroChunks = true;  // partial chunks: rows past d_end must be defined
  static constexpr int kFirstForm = -1;      // read Args::first_form_f1
  static constexpr int kZ = -1;              // z given: read a.z
  static constexpr bool kFastSr = false;     // every chunk takes the per-row path
  struct Raw {
    uint32_t w[kMaxCols];
  };

  int dim_, dstate_, ncols_, rounds_, group_, run_log2_, state_bytes_;
  int32_t state_dtype_, input_dtype_, weight_dtype_;

  __device__ explicit DynConfig(const Args &a)
      : dim_(a.dim), dstate_(a.dstate), ncols_(a.dstate / 32), rounds_(a.philox_rounds),
        state_dtype_(a.state_dtype), input_dtype_(a.input_dtype), weight_dtype_(a.weight_dtype) {
    state_bytes_ = a.state_dtype == MAMBA_SSU_F32 ? 4 : 2;
    // Simple: run = min(16 / element size, dstate / 32); vertical: 4 bytes.
    // SR groups (fp16 state only): simple min(4, dstate / 32), vertical 2.
    const int run = a.simple ? min(16 / state_bytes_, ncols_) : 4 / state_bytes_;
    run_log2_ = __ffs(run) - 1;
    group_ = a.simple ? min(4, ncols_) : 2;
  }

  __device__ int dim() const { return dim_; }
  __device__ int dstate() const { return dstate_; }
  __device__ int ncols() const { return ncols_; }
  __device__ int rounds() const { return rounds_; }
  __device__ int sr_group() const { return group_; }
  __device__ int run() const { return 1 << run_log2_; }
  __device__ int state_bytes() const { return state_bytes_; }
  __device__ int input_bytes() const { return input_dtype_ == MAMBA_SSU_F32 ? 4 : 2; }

  __device__ int col(int lane, int i) const {
    return (lane << run_log2_) + ((i >> run_log2_) << (run_log2_ + 5)) + (i & (run() - 1));
  }

  __device__ void load_state(const void *row, int lane, Raw &r) const {
#pragma unroll
    for (int i = 0; i < kMaxCols; ++i) {
      if (i < ncols_) {
        const int n = col(lane, i);
        r.w[i] = state_bytes_ == 4 ? static_cast<const uint32_t *>(row)[n]
                                   : static_cast<const unsigned short *>(row)[n];
      }
    }
  }
  // Over any config's Raw (DynLongConfig's holds more words).
  template <class R>
  __device__ float state_value(const R &r, int i) const {
    if (state_dtype_ == MAMBA_SSU_F32) return __uint_as_float(r.w[i]);
    return state_dtype_ == MAMBA_SSU_F16 ? half_bits_to_float(r.w[i])
                                         : bf16_bits_to_float(r.w[i]);
  }
  // Streaming stores, as in HotConfig::store_state.
  __device__ void store_state(void *row, int lane, const uint32_t (&bits)[kMaxCols]) const {
#pragma unroll
    for (int i = 0; i < kMaxCols; ++i) {
      if (i < ncols_) {
        const int n = col(lane, i);
        if (state_bytes_ == 4)
          store_cs_u32(static_cast<uint32_t *>(row) + n, bits[i]);
        else
          store_cs_u16(static_cast<unsigned short *>(row) + n, bits[i]);
      }
    }
  }
  __device__ uint32_t round_nearest(float v) const {
    if (state_dtype_ == MAMBA_SSU_F32) return __float_as_uint(v);
    return state_dtype_ == MAMBA_SSU_F16 ? float_to_half_bits_rn(v) : float_to_bf16_bits_rn(v);
  }

  __device__ void load_cols(const void *row, int lane, float (&v)[kMaxCols]) const {
#pragma unroll
    for (int i = 0; i < kMaxCols; ++i)
      v[i] = i < ncols_ ? load_float(row, col(lane, i), input_dtype_) : 0.0f;
  }

  __device__ float load_input(const void *p, int64_t idx) const {
    return load_float(p, idx, input_dtype_);
  }
  __device__ float load_weight(const void *p, int64_t idx) const {
    return load_float(p, idx, weight_dtype_);
  }
  __device__ void store_out(void *p, int64_t idx, float v) const {
    store_float(p, idx, input_dtype_, v);
  }

  struct Key {
    uint32_t k0, k1;
  };
  __device__ static Key make_key(uint64_t seed) {
    return Key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  }
  __device__ U32x4 philox(U32x4 c, const Key &k) const {
    return philox4x32_dyn(c, k.k0, k.k1, rounds_);
  }
};

// An int16 state's accesses (FlashInfer's block-scaled state, single token;
// docs/flashinfer-ssu.md, "int16 block-scaled state") over a generic config's lane columns
// (Base: DynConfig or DynUnevenConfig, its col() and ncols_): a row's integers read as
// rn(float(q) * scale) with the read slot's decode scale of the row (Raw::scale, loaded by
// ssu_body: load_scales; 1 without scales), written by ssu_body (i16_encode_row,
// quantize_i16_row) from the row's fp32 values.
template <class Base>
struct I16Columns : Base {
  static constexpr bool kI16Scaled = true;  // scaled_state
  static constexpr int kMaxCols = Base::kMaxCols;
  struct Raw {
    uint32_t w[kMaxCols];
    float scale;
  };

  __device__ explicit I16Columns(const Args &a) : Base(a) {}

  __device__ void load_state(const void *row, int lane, Raw &r) const {
#pragma unroll
    for (int i = 0; i < kMaxCols; ++i) {
      if (i < this->ncols_) r.w[i] = static_cast<const unsigned short *>(row)[this->col(lane, i)];
    }
  }
  __device__ float state_value(const Raw &r, int i) const {
    return __fmul_rn(static_cast<float>(static_cast<int16_t>(static_cast<uint16_t>(r.w[i]))),
                     r.scale);
  }
  __device__ void store_state(void *row, int lane, const uint32_t (&bits)[kMaxCols]) const {
#pragma unroll
    for (int i = 0; i < kMaxCols; ++i) {
      if (i < this->ncols_)
        store_cs_u16(static_cast<unsigned short *>(row) + this->col(lane, i), bits[i]);
    }
  }
};

// The generic path for an int16 state: DynConfig's lane columns for a 2-byte state with
// I16Columns' accesses. A config of its own, so that DynConfig's kernel keeps its code.
struct DynI16Config : I16Columns<DynConfig> {
  __device__ explicit DynI16Config(const Args &a) : I16Columns<DynConfig>(a) {}
};

// The generic path at a dstate between the compiled-in ones that FlashInfer's single-token
// kernels take (checks.h: uneven_dstate; 96, 160, 192, 224), where a lane's columns are not
// DynConfig's power-of-two runs (docs/flashinfer-ssu.md, "dstate 96 in FlashInfer's kernels",
// "dstates 160, 192 and 224": simple runs of 5, 6 and 7 columns with a 2-byte state).
// FlashInfer's simple and vertical kernels give lane l runs of c columns, c = min(16 / element
// size, dstate / 32) (simple) or 4 / element size (vertical), at l * c + 32 * c * j for every
// j with l * c + 32 * c * j < dstate: at dstate 96 simple lane l owns 3l..3l+2 (one run; run
// 3 is not a power of two), vertical with a 2-byte state 2l, 2l+1 and, for l < 16 only,
// 64+2l, 65+2l (lanes 16..31 hold 2 columns), with an fp32 state l, 32+l, 64+l. ncols() is the
// lane's own count. The stochastic-rounding words follow the lane's runs (kRunWords, sr_words):
// the element at position p of a run takes word p mod 4 of the Philox call at the offset of the
// run's element p - p mod 4 (the groups of 4 restart at each run; at dstate 96 simple: word
// n mod 3 of Philox(... + 3 * floor(n / 3)), vertical: word n mod 2 as at every dstate). A
// config of its own, in a unit of its own (ssu_uneven.cu), so that DynConfig's kernel
// keeps its code.
struct DynUnevenConfig : DynConfig {
  static constexpr bool kRunWords = true;  // sr_words: words by run position
  int run_, run_magic_;

  __device__ explicit DynUnevenConfig(const Args &a) : DynUnevenConfig(a, kMaxCols) {}

 protected:
  // A lane's columns capped at max_cols (the config's kMaxCols: DynLongConfig's 16).
  __device__ DynUnevenConfig(const Args &a, int max_cols) : DynConfig(a) {
    run_ = a.simple ? min(16 / state_bytes_, dstate_ / 32) : 4 / state_bytes_;
    // i / run_ as (i * ceil(32 / run_)) >> 5: exact for i < 8 and run_ <= 8 (this config), and
    // for i < 16 at the runs of 4 and 8 columns DynLongConfig has.
    run_magic_ = (32 + run_ - 1) / run_;
    const int first = (static_cast<int>(threadIdx.x) & 31) * run_;
    const int stride = 32 * run_;
    // Whole runs below dstate (the launcher takes only dstates that runs divide).
    ncols_ = min(max_cols, first < dstate_ ? (dstate_ - first + stride - 1) / stride * run_ : 0);
  }

 public:
  __device__ int run() const { return run_; }
  __device__ int col(int lane, int i) const {
    const int j = (i * run_magic_) >> 5;  // i / run_
    return lane * run_ + j * 32 * run_ + (i - j * run_);
  }

  // DynConfig's accesses over this config's col() and per-lane ncols(), for a lane of N columns
  // at most (kMaxCols; DynLongConfig's 16).
  template <class R>
  __device__ void load_state(const void *row, int lane, R &r) const {
    constexpr int N = sizeof(r.w) / sizeof(r.w[0]);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (i < ncols_) {
        const int n = col(lane, i);
        r.w[i] = state_bytes_ == 4 ? static_cast<const uint32_t *>(row)[n]
                                   : static_cast<const unsigned short *>(row)[n];
      }
    }
  }
  template <int N>
  __device__ void store_state(void *row, int lane, const uint32_t (&bits)[N]) const {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (i < ncols_) {
        const int n = col(lane, i);
        if (state_bytes_ == 4)
          store_cs_u32(static_cast<uint32_t *>(row) + n, bits[i]);
        else
          store_cs_u16(static_cast<unsigned short *>(row) + n, bits[i]);
      }
    }
  }
  template <int N>
  __device__ void load_cols(const void *row, int lane, float (&v)[N]) const {
#pragma unroll
    for (int i = 0; i < N; ++i)
      v[i] = i < ncols_ ? load_float(row, col(lane, i), input_dtype_) : 0.0f;
  }
};

// Rows longer than 256 columns (checks.h: long_dstate; up to 512): DynUnevenConfig's lane runs
// (FlashInfer's simple kernel: runs of 8 columns of a 2-byte state, 4 of an fp32 one, lane l's
// at l * run + 32 * run * j; at dstate 288 lanes 0..3 hold 16 columns and the others 8) with up
// to 16 columns a lane. One config per state dtype (kStateDtype: F16, BF16 or F32; an I16 state
// is DynLongI16Config's, below), so that the run, the element conversions
// and the stochastic rounding (an F16 state's only) are constants of the kernel (a run-time
// dtype compiles to an indirect branch per element: docs/perf-notes.md, "above dstate 256: the
// generic kernel's accesses"): each run is 16 bytes at a 16-byte aligned offset (the launcher
// checked the state's base and strides for 16-byte alignment, and a row is a multiple of 64
// bytes), read with one vector load and written with one streaming vector store, as FlashInfer's
// simple kernel moves it. The state's words, x and z stay as loaded until the row is computed
// (Raw, kRawInputs): a conversion beside its load would wait for it there, and the next chunk's
// loads would not overlap the current chunk's work (perf-notes, "above dstate 256: the loads
// that waited"). kBlocks blocks of 4 warps per SM and kChunkRows rows a chunk: 1-row chunks at 4
// blocks (<= 128 registers) by default, 1.4–1.6x faster than 2-row chunks at 2 blocks (same-run
// A/B, perf-notes). Configs of their own, in ssu_uneven.cu, so that the other generic kernels
// keep their code. FlashInfer's vertical kernel refuses these dstates (checks.h:
// check_vertical_dstate; the launcher refuses AUTO resolved to it).
template <int32_t kStateDtype, int kBlocks = 4, int kChunkRows = 1>
struct DynLongConfig : DynUnevenConfig {
  static_assert(kStateDtype == MAMBA_SSU_F16 || kStateDtype == MAMBA_SSU_BF16 ||
                    kStateDtype == MAMBA_SSU_F32,
                "an F16, BF16 or F32 state");
  static constexpr int kStateBytes = kStateDtype == MAMBA_SSU_F32 ? 4 : 2;
  static constexpr int kMaxCols = 16;
  static constexpr int kMinBlocksPerSM = kBlocks;
  static constexpr int kRowsPerChunk = kChunkRows;
  static constexpr bool kRawInputs = true;  // x and z as loaded (HasRawInputs)
  static constexpr int kRun = 16 / kStateBytes;  // columns of one 16-byte run
  static constexpr int kRuns = kMaxCols / kRun;  // runs a lane holds at most
  // The words of a lane's runs as loaded (2 columns a word of a 2-byte state), converted where
  // the row is computed (state_value).
  struct Raw {
    uint32_t w[kMaxCols * kStateBytes / 4];
  };
  __device__ explicit DynLongConfig(const Args &a) : DynUnevenConfig(a, kMaxCols) {}

  __device__ int run() const { return kRun; }
  __device__ int state_bytes() const { return kStateBytes; }
  // Every lane holds at least 8 columns: above 256 a row of a 2-byte state (a multiple of 32
  // columns, checks.h) has at least 36 runs of 8, one of an fp32 state (a multiple of 16) at
  // least 68 runs of 4, so lane 31's first two runs are in the row. The tests of the first 8
  // columns then fold away.
  __device__ int ncols() const {
    __builtin_assume(ncols_ >= 8);
    return ncols_;
  }
  // Philox rounds: only an F16 state takes stochastic rounding (checks.h).
  __device__ int rounds() const { return kStateDtype == MAMBA_SSU_F16 ? rounds_ : 0; }
  __device__ int col(int lane, int i) const {
    return lane * kRun + (i / kRun) * 32 * kRun + i % kRun;
  }

  // x and z as loaded (kRawInputs), converted by input_value where the row is computed.
  __device__ uint32_t load_input_word(const void *p, int64_t idx) const {
    return input_dtype_ == MAMBA_SSU_F32 ? static_cast<const uint32_t *>(p)[idx]
                                         : static_cast<const unsigned short *>(p)[idx];
  }
  __device__ float input_value(uint32_t w) const {
    if (input_dtype_ == MAMBA_SSU_F32) return __uint_as_float(w);
    return input_dtype_ == MAMBA_SSU_F16 ? half_bits_to_float(w) : bf16_bits_to_float(w);
  }

  __device__ void load_state(const void *row, int lane, Raw &r) const {
    const char *p = static_cast<const char *>(row);
#pragma unroll
    for (int j = 0; j < kRuns; ++j) {
      if (j * kRun < ncols()) {
        const uint4 v = *reinterpret_cast<const uint4 *>(p + 16 * (lane + 32 * j));
        r.w[4 * j] = v.x;
        r.w[4 * j + 1] = v.y;
        r.w[4 * j + 2] = v.z;
        r.w[4 * j + 3] = v.w;
      }
    }
  }
  // Element i's bits (a 2-byte state's in the low half).
  __device__ uint32_t element_bits(const Raw &r, int i) const {
    if constexpr (kStateBytes == 4) return r.w[i];
    else return (r.w[i / 2] >> (16 * (i % 2))) & 0xffffu;
  }
  __device__ float state_value(const Raw &r, int i) const {
    if constexpr (kStateDtype == MAMBA_SSU_F32) return __uint_as_float(element_bits(r, i));
    else if constexpr (kStateDtype == MAMBA_SSU_F16) return half_bits_to_float(element_bits(r, i));
    else return bf16_bits_to_float(element_bits(r, i));
  }
  __device__ void store_state(void *row, int lane, const uint32_t (&bits)[kMaxCols]) const {
    char *p = static_cast<char *>(row);
#pragma unroll
    for (int j = 0; j < kRuns; ++j) {
      if (j * kRun < ncols()) {
        uint32_t q[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
          q[k] = kStateBytes == 4 ? bits[j * kRun + k]
                                  : bits[j * kRun + 2 * k] | (bits[j * kRun + 2 * k + 1] << 16);
        __stcs(reinterpret_cast<uint4 *>(p + 16 * (lane + 32 * j)),
               make_uint4(q[0], q[1], q[2], q[3]));
      }
    }
  }
  __device__ uint32_t round_nearest(float v) const {
    if constexpr (kStateDtype == MAMBA_SSU_F32) return __float_as_uint(v);
    else if constexpr (kStateDtype == MAMBA_SSU_F16) return float_to_half_bits_rn(v);
    else return float_to_bf16_bits_rn(v);
  }
};
using DynLongF16Config = DynLongConfig<MAMBA_SSU_F16>;
using DynLongBf16Config = DynLongConfig<MAMBA_SSU_BF16>;
using DynLongF32Config = DynLongConfig<MAMBA_SSU_F32>;

// Whether Cfg is a DynLongConfig.
template <class Cfg>
struct IsDynLong : std::false_type {};
template <int32_t kStateDtype, int kBlocks, int kChunkRows>
struct IsDynLong<DynLongConfig<kStateDtype, kBlocks, kChunkRows>> : std::true_type {};

// DynUnevenConfig at 6 blocks of 4 warps per SM (<= 80 registers, some spilled) instead of
// DynConfig's 4, for the calls that read >= 48 MiB of state (ssu.cu; the kernel is bound by its
// instructions at a quarter of the warps: 0.88–0.90x the time there, 1.08–1.10x at 12 MiB,
// docs/perf-notes.md, "dstate 96: where the run-time kernel's time goes").
struct DynUnevenWideConfig : DynUnevenConfig {
  static constexpr int kMinBlocksPerSM = 6;
  __device__ explicit DynUnevenWideConfig(const Args &a) : DynUnevenConfig(a) {}
};

// An int16 block-scaled state at an uneven dstate (96, 160, 192, 224): DynUnevenConfig's lane
// runs with I16Columns' accesses (no SR), a config of its own so that DynUnevenConfig's and
// DynI16Config's kernels keep their code.
struct DynUnevenI16Config : I16Columns<DynUnevenConfig> {
  __device__ explicit DynUnevenI16Config(const Args &a) : I16Columns<DynUnevenConfig>(a) {}
};

// An int16 block-scaled state at dstate 512 (checks.h: check_long_dstate; the single-token
// dstate above 256 at which FlashInfer's simple kernels define the result): FlashInfer's lane
// runs of 8 columns, 256 apart (lane l holds 8l..8l+7 and 256+8l..256+8l+7: 16 columns),
// DynUnevenConfig's col() with up to 16 columns a lane, I16Columns' accesses (no SR). Its first
// accumulate form is read from Args::first_form_f1 as DynI16Config's (one form for every row:
// FlashInfer's simple kernels have no pad path of their own). A config of its own, in
// ssu_uneven.cu, so that the other generic kernels keep their code.
struct DynLongI16Columns : DynUnevenConfig {
  static constexpr int kMaxCols = 16;
  __device__ explicit DynLongI16Columns(const Args &a) : DynUnevenConfig(a, kMaxCols) {}
};
struct DynLongI16Config : I16Columns<DynLongI16Columns> {
  __device__ explicit DynLongI16Config(const Args &a) : I16Columns<DynLongI16Columns>(a) {}
};

// The generic configs of an fp32 state with fp32 inputs (RowForms<DynConfig>,
// RowForms<DynUnevenConfig>, RowForms<DynUnevenWideConfig>, above 256
// RowForms<DynLongConfig<F32, 2, 2>>; ssu_uneven.cu): a row takes
// the first form Args::first_form_f1 holds for its kind, bits 0-1 for a row whose read slot is
// not the pad slot and bits 2-3 for a pad row, each 0 (F0), 1 (F1) or 2 (F2: no contraction,
// rn(rn(sel * rn(D * x)) + rn(C * s'))), as FlashInfer's build contracts its kernels for those
// dtypes (ssu.cu: f32_input_form). Configs of their own, so that the other generic kernels keep
// their code.
template <class Base>
struct RowForms : Base {
  static constexpr bool kRowForms = true;
  __device__ explicit RowForms(const Args &a) : Base(a) {}
};

// fp32 inputs over an fp32 state above 256: RowForms over 2-row chunks at 2 blocks per SM, the
// launch shape its recordings were checked with on a GPU (tests/data/flashinfer_ssu_dsbig_f32in*;
// not timed against FlashInfer).
using DynLongF32InputsConfig = RowForms<DynLongConfig<MAMBA_SSU_F32, 2, 2>>;

// Whether Cfg is a RowForms config.
template <class Cfg, class = void>
struct HasRowForms : std::false_type {};
template <class Cfg>
struct HasRowForms<Cfg, std::void_t<decltype(Cfg::kRowForms)>> : std::true_type {};

// Whether a config's random words follow its runs (Cfg::kRunWords: DynUnevenConfig; HotConfig and
// DynConfig, which every other config derives from, declare false): sr_words's second form.
template <class Cfg>
__device__ constexpr bool run_words() {
  return Cfg::kRunWords;
}

// sr_words for a config whose words follow its runs (run_words): the lane's element i at
// position p = i mod run() of its run takes word p mod 4 of the Philox call at the element
// offset of the run's element p - p mod 4 (sr_lane: the offset of the lane's first column).
template <class Cfg>
__device__ __forceinline__ void sr_run_words(const Cfg &cfg, const typename Cfg::Key &key,
                                             uint64_t sr_lane, int lane,
                                             uint32_t (&rnd)[Cfg::kMaxCols]) {
  U32x4 w{};
#pragma unroll
  for (int i = 0; i < Cfg::kMaxCols; ++i) {
    if (i < cfg.ncols()) {
      const int p = cfg.col(lane, i) % cfg.run();  // runs start at multiples of run()
      if (p % 4 == 0) {
        const uint32_t dist = static_cast<uint32_t>(cfg.col(lane, i) - cfg.col(lane, 0));
        w = cfg.philox(philox_counter(sr_lane + dist), key);
      }
      const int k = p % 4;
      rnd[i] = k == 0 ? w.x : k == 1 ? w.y : k == 2 ? w.z : w.w;
    }
  }
}

// Whether a config's state is int16 with decode scales: a config that declares
// `kI16Scaled = true` (DynI16Config; the compiled-in I16State wrappers, ssu_stp_states_i16.cu).
template <class Cfg, class = void>
struct ScaledState : std::false_type {};
template <class Cfg>
struct ScaledState<Cfg, std::void_t<decltype(Cfg::kI16Scaled)>>
    : std::integral_constant<bool, Cfg::kI16Scaled> {};
template <class Cfg>
__device__ constexpr bool scaled_state() {
  return ScaledState<Cfg>::value;
}

// ---------------------------------------------------------------------------
// The body
// ---------------------------------------------------------------------------

// Whether a config's exact SR path converts under the call's rule (Args::sr_rule): the generic
// kernels only (DynConfig, DynUnevenConfig, DynUnevenWideConfig, DynLongConfig). The hot kernels
// are FlashInfer 0.7.2's alone (the launcher sends SR calls under MAMBA_SSU_SR_V074 to the
// generic kernels), so their code does not change with the rule's existence.
template <class Cfg>
__device__ constexpr bool sr_rule_at_run_time() {
  return std::is_same<Cfg, DynConfig>::value || std::is_same<Cfg, DynUnevenConfig>::value ||
         std::is_same<Cfg, DynUnevenWideConfig>::value || IsDynLong<Cfg>::value;
}

// The rows of a chunk are reduced together (see reduce_rows), and after the
// reduction lane l holds the output of row chunk_row(l) of the chunk when
// l is a multiple of 32 / U.
template <int U>
__device__ __forceinline__ int chunk_row(int lane) {
  int row = 0;
#pragma unroll
  for (int j = 0; (1 << j) < U; ++j) row |= ((lane >> (4 - j)) & 1) << j;
  return row;
}

// The 32-lane shuffle-down tree sum (v = v + other, offsets 16, 8, 4, 2, 1,
// lane 0's value) of U rows at once, bit for bit: at the first log2(U)
// offsets o each lane keeps the value of one row of a pair and sends the
// other's, so a lane computes exactly the addition (up to the operand order
// of the commutative fp32 add) that lane (l mod o) computes in the one-row
// tree; the remaining offsets are the plain tree inside groups of 32 / U
// lanes. Row chunk_row(l) ends in lane l = its group's first lane. U shuffles
// per chunk (plus 5 - log2(U) tail ones) instead of 5 per row.
template <int U>
__device__ __forceinline__ float reduce_rows(float (&v)[U], int lane) {
#pragma unroll
  for (int j = 0, n = U; n > 1; ++j, n /= 2) {
    const int off = 16 >> j;
    const bool upper = (lane & off) != 0;
#pragma unroll
    for (int m = 0; m < n / 2; ++m) {
      const float keep = upper ? v[2 * m + 1] : v[2 * m];
      const float send = upper ? v[2 * m] : v[2 * m + 1];
      v[m] = __fadd_rn(keep, __shfl_xor_sync(kFullMask, send, off));
    }
  }
  float acc = v[0];
#pragma unroll
  for (int off = 32 / U / 2; off >= 1; off /= 2)
    acc = __fadd_rn(acc, __shfl_down_sync(kFullMask, acc, off));
  return acc;
}

// Whether a config keeps x and z as the words it loaded, converted where the row is computed
// (Cfg::kRawInputs: DynLongConfig, whose input dtype is a run-time value; a conversion next to
// its load waits for the load, so that the next chunk's loads would not overlap the current
// chunk's work: docs/perf-notes.md, "above dstate 256: the loads that waited").
template <class Cfg, class = void>
struct HasRawInputs : std::false_type {};
template <class Cfg>
struct HasRawInputs<Cfg, std::void_t<decltype(Cfg::kRawInputs)>>
    : std::integral_constant<bool, Cfg::kRawInputs> {};

// The type a chunk holds x and z in: their loaded words (HasRawInputs) or their fp32 values.
template <class Cfg>
using InputWord = std::conditional_t<HasRawInputs<Cfg>::value, uint32_t, float>;

// One chunk of rows of one warp: the packed state and x of each row, and the
// z of the row whose output this lane computes (chunk_row).
template <class Cfg>
struct Chunk {
  typename Cfg::Raw state[Cfg::kRowsPerChunk];
  InputWord<Cfg> x[Cfg::kRowsPerChunk];
  InputWord<Cfg> z;
};

// A chunk before its loads: zeroed when Cfg::kZeroChunks, else left for the loads to fill (every
// field the body reads is then loaded). Written as an initialiser: with relocatable device code
// (how the crate is built), declaring the chunk and assigning {} afterwards gave the no-SR kernels
// a slower schedule (perf-notes: what the profiler and a micro-benchmark said (2026-11-30)).
#pragma nv_diagnostic push
#pragma nv_diag_suppress 549  // "c is used before its value is set": on purpose, see above
template <class Cfg>
__device__ __forceinline__ Chunk<Cfg> fresh_chunk() {
  if constexpr (Cfg::kZeroChunks) {
    return Chunk<Cfg>{};
  } else {
    Chunk<Cfg> c;
    return c;
  }
}
#pragma nv_diagnostic pop

// Whether the call gates its output with z: a compile-time fact in the hot kernels.
template <class Cfg>
__device__ __forceinline__ bool has_z(const Args &a) {
  if constexpr (Cfg::kZ >= 0) {
    return Cfg::kZ == 1;
  } else {
    return a.z != nullptr;
  }
}

template <class Cfg>
__device__ __forceinline__ void load_chunk(const Cfg &cfg, const Args &a, Chunk<Cfg> &c, int d0,
                                           int d_end, int lane, const char *read_head,
                                           int64_t x_row, int64_t z_row, bool pad) {
  constexpr int U = Cfg::kRowsPerChunk;
  if constexpr (Cfg::kVecX) cfg.load_x(a.x, x_row + d0, c.x);
  // Cfg::kLdNoAllocate: the state rows loaded without allocating them in L1
  // (`ld.global.L1::no_allocate`: each byte is read once), as inline PTX whose immediate row
  // offsets keep the addresses folded (loads.cuh: load_no_allocate_u32x2; the SASS is the default
  // loads' with the .NA qualifier; the `__ldcs`-style intrinsics cost more instructions per chunk:
  // perf-notes: the Philox high products on the FP64 pipe, streaming state stores (2026-11-30)).
  if constexpr (Cfg::kLdNoAllocate) {
    static_assert(U == 4 && Cfg::dstate() * Cfg::state_bytes() == 256, "4 rows of 256 bytes");
    // Pads read the zero page (kZeroPage). The asm has no memory clobber: a row's load precedes
    // the store that depends on its value, and no other store of the kernel touches it.
    const char *base = read_head + static_cast<int64_t>(d0) * 256 + 8 * lane;
    const uint2 r0 = load_no_allocate_u32x2<0>(base);
    const uint2 r1 = load_no_allocate_u32x2<256>(base);
    const uint2 r2 = load_no_allocate_u32x2<512>(base);
    const uint2 r3 = load_no_allocate_u32x2<768>(base);
    c.state[0].w[0] = r0.x;
    c.state[0].w[1] = r0.y;
    c.state[1].w[0] = r1.x;
    c.state[1].w[1] = r1.y;
    c.state[2].w[0] = r2.x;
    c.state[2].w[1] = r2.y;
    c.state[3].w[0] = r3.x;
    c.state[3].w[1] = r3.y;
    c.z = 0.0f;  // never read
  } else {
#pragma unroll
    for (int r = 0; r < U; ++r) {
      const int d = d0 + r;
      if (Cfg::kFullChunks || d < d_end) {
        if constexpr (HasRawInputs<Cfg>::value) c.x[r] = cfg.load_input_word(a.x, x_row + d);
        else if constexpr (!Cfg::kVecX) c.x[r] = cfg.load_input(a.x, x_row + d);
        if (Cfg::kZeroPage || !pad) {
          cfg.load_state(read_head + static_cast<int64_t>(d) * cfg.dstate() * cfg.state_bytes(),
                         lane, c.state[r]);
        } else if constexpr (!Cfg::kZeroChunks) {
          // A pad slot's state is read as 0. Word by word (Cfg::kZeroWords): the aggregate
          // `= {}` is compiled into a load of an 8-byte zero constant from global memory and six
          // register moves per chunk; word by word, four CS2R.
          if constexpr (Cfg::kZeroWords) {
#pragma unroll
            for (int w = 0; w < static_cast<int>(sizeof(c.state[r].w) / sizeof(c.state[r].w[0]));
                 ++w)
              c.state[r].w[w] = 0u;
          } else {
            c.state[r] = {};
          }
        }
      }
    }
    const int dz = d0 + chunk_row<U>(lane);
    if constexpr (Cfg::kZ == 0) {
      c.z = 0.0f;  // never read
    } else if constexpr (Cfg::kZeroChunks) {
      if (has_z<Cfg>(a) && (Cfg::kFullChunks || dz < d_end)) {
        if constexpr (HasRawInputs<Cfg>::value) c.z = cfg.load_input_word(a.z, z_row + dz);
        else c.z = cfg.load_input(a.z, z_row + dz);
      }
    } else {
      c.z = has_z<Cfg>(a) ? cfg.load_input(a.z, z_row + dz) : 0.0f;
    }
  }
}

// The fused seed: the stock torch draw at generator state (seed, offset) (Philox4x32-10,
// word 1), both preloaded by the caller. With full chunks every warp of the block reaches this
// point (a block serves one (b, h), so `sr` is block-uniform), and when a.block_seed is set one
// thread derives the seed for the whole block: 10 Philox rounds once per block instead of once
// per warp, which pays off on large grids; on small ones the barrier's latency costs more than
// the rounds it saves, so each warp derives it (the host sets block_seed from the grid size).
template <class Cfg>
__device__ __forceinline__ uint64_t derive_seed(const Args &a, uint64_t seed, uint64_t offset) {
  if constexpr (Cfg::kFullChunks) {
    if (a.block_seed != 0) {  // grid-uniform
      __shared__ uint64_t block_seed;
      if (threadIdx.x == 0) block_seed = static_cast<uint64_t>(torch_seed_draw(seed, offset));
      __syncthreads();
      return block_seed;
    }
  }
  return static_cast<uint64_t>(torch_seed_draw(seed, offset));
}

// Zeros read in place of a pad slot's state by the hot SR kernels (kZeroPage): their state loads
// are then unconditional, without a predicate and the register moves it brings. One head of
// dim 64 (HotConfig); HotDimConfig's, for heads of up to 256 rows, is zero_page_wide.
__device__ __align__(16) static uint8_t zero_page[64 * 128 * 2];
__device__ __align__(16) static uint8_t zero_page_wide[256 * 128 * 2];

// The zero page of a config: HotDimConfig's own, else the dim-64 one.
template <class Cfg>
__device__ __forceinline__ const char *zero_page_of() {
  if constexpr (IsHotDim<Cfg>::value) {
    return reinterpret_cast<const char *>(zero_page_wide);
  } else {
    return reinterpret_cast<const char *>(zero_page);
  }
}

// The decode scales of a chunk's rows (DynI16Config): row d's from the read slot's scale row,
// 1 where there is none (a pad, an int16 state without scales, a row past d_end).
template <class Cfg>
__device__ __forceinline__ void load_scales(Chunk<Cfg> &c, int d0, int d_end,
                                            const float *read_scale) {
#pragma unroll
  for (int r = 0; r < Cfg::kRowsPerChunk; ++r)
    c.state[r].scale = read_scale != nullptr && d0 + r < d_end ? read_scale[d0 + r] : 1.0f;
}

// An int16 row's encode factor from its fp32 values s (the lane's columns), FlashInfer's
// quantisation: with scales, m = max |s| over the row (fmaxf from -FLT_MAX: NaN ignored; across
// the warp one redux.sync max of the lanes' partials as signed integers, which orders them as
// fmaxf does: a partial is -FLT_MAX, a negative integer, or a non-negative float, whose bits
// order as its value), e = 1 when m is 0 (under -ftz: also a subnormal m), else
// rn(rcp.approx(m) * 32767); without scales e = 1. `scaled` is warp-uniform; called by every
// lane of the warp. The row's decode scale is rcp.approx(e) (stored by ssu_body).
template <class Cfg>
__device__ __forceinline__ float i16_encode_row(const Cfg &cfg, const float (&s)[Cfg::kMaxCols],
                                                bool scaled) {
  if (!scaled) return 1.0f;
  float m = -3.40282347e38f;
#pragma unroll
  for (int i = 0; i < Cfg::kMaxCols; ++i)
    if (i < cfg.ncols()) m = fmaxf(m, fabsf(s[i]));
  m = __int_as_float(__reduce_max_sync(kFullMask, __float_as_int(m)));
  return m == 0.0f ? 1.0f : __fmul_rn(rcp_approx(m), 32767.0f);
}

// One row of an int16 state quantised with encode factor e: each element
// q = rni(min(max(rn(s * e), -32767), 32767)) (a NaN product reads -32767), its low 16 bits in
// bits[i].
template <class Cfg>
__device__ __forceinline__ void quantize_i16_row(const Cfg &cfg, const float (&s)[Cfg::kMaxCols],
                                                 uint32_t (&bits)[Cfg::kMaxCols], float e) {
#pragma unroll
  for (int i = 0; i < Cfg::kMaxCols; ++i) {
    if (i < cfg.ncols()) {
      const float q = fminf(fmaxf(__fmul_rn(s[i], e), -32767.0f), 32767.0f);
      bits[i] = static_cast<uint32_t>(__float2int_rn(q)) & 0xffffu;
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void ssu_body(const Args &a, const ScaleArgs &sc = ScaleArgs{}) {
  constexpr int K = Cfg::kMaxCols;
  constexpr int U = Cfg::kRowsPerChunk;
  const Cfg cfg(a);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;

  // A fused chain's next link: the grid's extra FIRST block stores the stock draw that follows
  // this call's position (the next call's seed) and does nothing else. Block 0 is dispatched in
  // the first wave, so its generator-state load and 10 Philox rounds run beside the state
  // blocks instead of after the last wave (as the grid's last block, it was dispatched at the
  // tail of large grids). The state blocks are numbered from 1.
  if (a.seed_next != nullptr && blockIdx.x == 0) {  // block-uniform
    if (threadIdx.x == 0)
      store_next_link(a.seed_next, a.gen_seed, a.gen_offset, a.generator_seed, a.seed_offset);
    return;
  }
  const uint32_t block = blockIdx.x - (a.seed_next != nullptr ? 1u : 0u);

  // The seed's inputs do not depend on the slot: their loads go out first, so that their
  // latency (and, for a fused seed, the 10 Philox rounds after them) overlaps the slot-index
  // and state loads instead of following them. The launcher checked the pointers whenever
  // rounds > 0 (grid-uniform).
  uint64_t seed_in = 0, seed_offset_in = 0;
  if (cfg.rounds() > 0) {
    if (a.seed_source == MAMBA_SSU_SEED_POINTER) {
      seed_in = static_cast<uint64_t>(*a.rand_seed);
    } else if (a.seed_source == MAMBA_SSU_SEED_FROM_GENERATOR) {
      seed_in = *a.gen_seed;
      seed_offset_in = *a.gen_offset + a.seed_offset;
    } else {
      seed_in = a.generator_seed;
      seed_offset_in = a.seed_offset;
    }
  }

  // (b, h) of this block and the index of its first warp in the head, without the
  // ~20-instruction integer divisions that would otherwise sit in front of the slot-index load
  // (the root of the kernel's latency chain). The tail blocks of a tapered grid (the launcher
  // tapers only grids of one block per head) serve a part of a head each, in shorter warps.
  uint32_t bh, warp0;
  int rpw = a.rows_per_warp;
  if (Cfg::kTaper && block >= a.taper_start) {  // block-uniform: a block of the grid's tail
    const uint32_t j = block - a.taper_start;
    bh = a.taper_start + (j >> a.taper_shift);
    warp0 = (j & ((1u << a.taper_shift) - 1u)) * (blockDim.x >> 5);
    rpw >>= a.taper_shift;
  } else {
    bh = (__umulhi(block, a.bph_magic) + block) >> a.bph_shift;
    warp0 = block - bh * a.blocks_per_head;  // the block's index in the head
    if constexpr (Cfg::kTaper) warp0 *= Cfg::kBlockWarps;
  }
  const uint32_t b32 = (__umulhi(bh, a.nheads_magic) + bh) >> a.nheads_shift;
  const int64_t b = b32;
  const int64_t h = bh - b32 * a.nheads;
  const int dim = cfg.dim();
  const int dstate = cfg.dstate();
  // The kernels without a taper keep the expressions they were measured with (ptxas schedules
  // the whole kernel differently for equivalent ones).
  const int d_begin = Cfg::kTaper ? (static_cast<int>(warp0) + warp) * rpw
                                  : (static_cast<int>(warp0) * Cfg::kBlockWarps + warp) *
                                        a.rows_per_warp;
  if (!Cfg::kFullChunks && d_begin >= dim) return;  // warp-uniform; no block barrier follows
  const int d_end = Cfg::kTaper         ? d_begin + rpw
                    : Cfg::kFullChunks ? d_begin + a.rows_per_warp
                                       : min(dim, d_begin + a.rows_per_warp);

  // Slots. Out-of-range slots are treated like pads (never dereferenced).
  const int64_t read_slot =
      a.state_batch_indices != nullptr
          ? load_index(a.state_batch_indices, b * a.state_batch_indices_stride, a.index_dtype)
          : b;
  const bool pad =
      read_slot == a.pad_slot_id || read_slot < 0 || read_slot >= a.state_cache_size;
  const int64_t write_slot =
      a.dst_state_batch_indices != nullptr
          ? load_index(a.dst_state_batch_indices, b * a.dst_state_batch_indices_stride,
                       a.index_dtype)
          : read_slot;
  const bool write = a.update_state != 0 && !pad && write_slot != a.pad_slot_id &&
                     write_slot >= 0 && write_slot < a.state_cache_size;

  const int64_t head_elems = h * dim * dstate;
  const int esize = cfg.state_bytes();
  char *const state = static_cast<char *>(a.state);
  const char *read_head =
      pad ? (Cfg::kZeroPage ? zero_page_of<Cfg>() : nullptr)
          : state + (read_slot * a.state_stride_batch + head_elems) * esize;
  char *write_head =
      write ? state + (write_slot * a.state_stride_batch + head_elems) * esize : nullptr;
  // Philox element offset of the head block: READ slot, 64-bit wrap-around.
  const uint64_t sr_head =
      static_cast<uint64_t>(read_slot) * static_cast<uint64_t>(a.state_stride_batch) +
      static_cast<uint64_t>(head_elems);
  const int64_t x_row = b * a.x_stride_batch + h * dim;
  const int64_t z_row = b * a.z_stride_batch + h * dim;
  const int64_t out_row = b * a.out_stride_batch + h * dim;
  const int my_row = chunk_row<U>(lane);  // the row whose output this lane may hold
  const bool out_lane = (lane & (32 / U - 1)) == 0;
  // An int16 state's scale rows of this head (DynI16Config): the read slot's, the write slot's.
  [[maybe_unused]] const float *read_scale = nullptr;
  [[maybe_unused]] float *write_scale = nullptr;
  if constexpr (scaled_state<Cfg>()) {
    if (sc.state_scale != nullptr) {
      const int64_t scale_head = h * dim;
      if (!pad) read_scale = sc.state_scale + read_slot * sc.slot_stride + scale_head;
      if (write) write_scale = sc.state_scale + write_slot * sc.slot_stride + scale_head;
    }
  }

  // The first chunk's loads go out before anything else: the scalars, B, C and the
  // Philox key below are computed while they are in flight.
  Chunk<Cfg> cur = {};
  load_chunk(cfg, a, cur, d_begin, d_end, lane, read_head, x_row, z_row, pad);
  if constexpr (scaled_state<Cfg>()) load_scales(cur, d_begin, d_end, read_scale);
  // L2 prefetch of the warp's later rows (Cfg::kL2Prefetch): one bulk prefetch of every row
  // after the first two chunks, issued here. A warp's rows are contiguous.
  constexpr int kRowBytes = Cfg::kFullChunks ? cfg.dstate() * cfg.state_bytes() : 0;
  if constexpr (Cfg::kL2Prefetch) {
    const int first = d_begin + 2 * U;
    if (!pad && lane == 0 && first < d_end &&
        (!Cfg::kL2PrefetchAtRunTime || a.l2_prefetch != 0)) {
      prefetch_l2_bulk(read_head + first * kRowBytes, (d_end - first) * kRowBytes);
    }
  }

  // Per (b, h) scalars.
  float dt = cfg.load_weight(a.dt, b * a.dt_stride_batch + h);
  if (a.dt_bias != nullptr) dt = __fadd_rn(dt, cfg.load_weight(a.dt_bias, h));
  if (a.dt_softplus != 0 && dt <= 20.0f) dt = softplus(dt);  // NaN skips
  const float dA = ex2_approx(__fmul_rn(__fmul_rn(a.A[h], dt), kL2E));
  const float D = a.D != nullptr ? cfg.load_weight(a.D, h) : 0.0f;
  const float sel = lane == 0 ? 1.0f : 0.0f;
  // DynUnevenI16Config: bit 0 the form of rows that are not pads, bit 1 of pad rows (ssu.cu:
  // i16_uneven_forms).
  const bool f1 = Cfg::kFirstForm >= 0 ? Cfg::kFirstForm == 1
                  : std::is_same<Cfg, DynUnevenI16Config>::value
                      ? ((a.first_form_f1 >> (pad ? 1 : 0)) & 1) != 0
                      : a.first_form_f1 != 0;
  // RowForms: the row's form, 0 F0, 1 F1, 2 F2 (bits 2-3 for a pad row).
  [[maybe_unused]] const int row_form =
      HasRowForms<Cfg>::value ? (a.first_form_f1 >> (pad ? 2 : 0)) & 3 : 0;
  // RowForms under the vertical mapping: FlashInfer's vertical kernel of an fp32 state with fp32
  // inputs contracts the other product of the update, s' = fma(x, dB, rn(dA * s)) (form H; read
  // from the SASS of both releases' builds, every dstate and weight dtype: first_forms.py,
  // stp_update_rule); its simple kernels, and every kernel of the other dtypes, take
  // s' = fma(dA, s, rn(x * dB)) (form S). A pad row's zero state gives rn(x * dB) either way.
  [[maybe_unused]] const bool update_h = HasRowForms<Cfg>::value && a.simple == 0;

  // B * dt' and C at the lane's columns.
  const int64_t g = h / a.heads_per_group;
  float Bdt[K], Cv[K];
  {
    const int bytes = cfg.input_bytes();
    const char *Brow = static_cast<const char *>(a.B) + (b * a.B_stride_batch + g * dstate) * bytes;
    const char *Crow = static_cast<const char *>(a.C) + (b * a.C_stride_batch + g * dstate) * bytes;
    cfg.load_cols(Brow, lane, Bdt);
    cfg.load_cols(Crow, lane, Cv);
#pragma unroll
    for (int i = 0; i < K; ++i) Bdt[i] = __fmul_rn(Bdt[i], dt);
  }

  // Philox key (only when this warp writes a stochastically rounded state).
  const bool sr = cfg.rounds() > 0 && write;
  uint64_t seed = 0;
  if (sr) {
    seed = a.seed_source == MAMBA_SSU_SEED_POINTER ? seed_in
                                                    : derive_seed<Cfg>(a, seed_in, seed_offset_in);
  }
  const typename Cfg::Key key = cfg.make_key(seed);


  // Philox element offset of this lane's first column in the current chunk's first row.
  uint64_t sr_chunk = sr_head + static_cast<uint64_t>(d_begin) * dstate +
                      static_cast<uint64_t>(cfg.col(lane, 0));
  // The fast SR path (hot kernels): the lane's Philox counters over the warp's rows share one
  // high word, so round 2's first product is computed here once (Cfg::round_two). Should the
  // rows cross a multiple of 2^32 (offsets near 2^32 with a large slot stride), the running
  // maximum starts at Inf and every chunk takes the exact path, whose counters are 64-bit.
  uint32_t sr_max_init = kSrMaxInit;
  [[maybe_unused]] uint32_t rt_z = 0, rt_w = 0;
  if constexpr (Cfg::kFastSr) {
    if (sr) {
      const uint32_t span =
          static_cast<uint32_t>((d_end - d_begin - 1) * dstate +
                                (cfg.col(lane, cfg.ncols() - cfg.sr_group()) - cfg.col(lane, 0)));
      if (static_cast<uint32_t>(sr_chunk) > 0xffffffffu - span) sr_max_init = kSrMaxForceExact;
      const auto t = cfg.round_two(static_cast<uint32_t>(sr_chunk >> 32), key);
      rt_z = t.z_xor;
      rt_w = t.w;
    }
  }
  // The output through a per-lane pointer (Cfg::kVecX) in the kernels without z: the gated ones
  // spill with it and keep the indexed store (perf-notes: the chunk's overhead instructions
  // (2026-12-01)).
  constexpr bool kOutPtr = Cfg::kVecX && Cfg::kZ == 0;
  [[maybe_unused]] unsigned short *out_p =
      static_cast<unsigned short *>(a.out) + out_row + d_begin + my_row;
  for (int d0 = d_begin; d0 < d_end; d0 += U) {
    // Issue the next chunk's loads before computing this one.
    // Every field the body reads is loaded, or zeroed by fresh_chunk (see there).
    Chunk<Cfg> next = fresh_chunk<Cfg>();
    if (d0 + U < d_end) load_chunk(cfg, a, next, d0 + U, d_end, lane, read_head, x_row, z_row, pad);
    if constexpr (scaled_state<Cfg>()) load_scales(next, d0 + U, d_end, read_scale);

    // s' = dA * s + x * (B * dt') in fp32 (rows past d_end compute garbage
    // that is neither stored nor output), and the lane partials of y.
    float s[U][K];
    float part_y[U];
    // A lane of an odd column count converts its last element in a pair with element ncols()
    // (never stored): defined as 0 (run_words configs only; the others' counts are even).
    if constexpr (run_words<Cfg>()) {
#pragma unroll
      for (int r = 0; r < U; ++r)
#pragma unroll
        for (int i = 0; i < K; ++i) s[r][i] = 0.0f;
    }
#pragma unroll
    for (int r = 0; r < U; ++r) {
      // x as fp32 (HasRawInputs: converted here). Written as a branch at the use: an identity
      // helper for the other configs changed their kernels' SASS (perf-notes, "above dstate
      // 256: the loads that waited"); so at the output's z below.
      float x;
      if constexpr (HasRawInputs<Cfg>::value) x = cfg.input_value(cur.x[r]);
      else x = cur.x[r];
#pragma unroll
      for (int i = 0; i < K; ++i) {
        if (i < cfg.ncols()) {
          if constexpr (HasRowForms<Cfg>::value) {
            const float sv = cfg.state_value(cur.state[r], i);
            s[r][i] = update_h ? __fmaf_rn(x, Bdt[i], __fmul_rn(dA, sv))
                               : __fmaf_rn(dA, sv, __fmul_rn(x, Bdt[i]));
          } else {
            s[r][i] = __fmaf_rn(dA, cfg.state_value(cur.state[r], i), __fmul_rn(x, Bdt[i]));
          }
        }
      }
      const float Dx = __fmul_rn(D, x);
      float acc;
      if constexpr (HasRowForms<Cfg>::value) {
        acc = row_form == 2   ? __fadd_rn(__fmul_rn(sel, Dx), __fmul_rn(Cv[0], s[r][0]))
              : row_form == 1 ? __fmaf_rn(Cv[0], s[r][0], __fmul_rn(sel, Dx))
                              : __fmaf_rn(sel, Dx, __fmul_rn(Cv[0], s[r][0]));
      } else {
        acc = f1 ? __fmaf_rn(Cv[0], s[r][0], __fmul_rn(sel, Dx))
                 : __fmaf_rn(sel, Dx, __fmul_rn(Cv[0], s[r][0]));
      }
#pragma unroll
      for (int i = 1; i < K; ++i) {
        if (i < cfg.ncols()) acc = __fmaf_rn(Cv[i], s[r][i], acc);
      }
      part_y[r] = acc;
    }
    // NaN when one of the lane's new state values in the chunk is (see sr_chunk_bad).
    [[maybe_unused]] float nan_probe = 0.0f;
    if constexpr (Cfg::kFastSr) {
#pragma unroll
      for (int r = 0; r < U; ++r) nan_probe = nan_step<Cfg::kHalfAcc>(nan_probe, part_y[r]);
    }

    // y of row my_row, gated, rounded into out.
    {
      const float y = reduce_rows<U>(part_y, lane);
      const int d = d0 + my_row;
      if (out_lane && (Cfg::kFullChunks || d < d_end))
      {
        if constexpr (HasRawInputs<Cfg>::value)
          cfg.store_out(a.out, out_row + d, has_z<Cfg>(a) ? gate(y, cfg.input_value(cur.z)) : y);
        else if constexpr (kOutPtr)
          cfg.store_out(out_p, 0, has_z<Cfg>(a) ? gate(y, cur.z) : y);
        else
          cfg.store_out(a.out, out_row + d, has_z<Cfg>(a) ? gate(y, cur.z) : y);
      }
    }

    if (write) {
      // Row r of the chunk: write_chunk + r * row bytes (constant offsets on the hot path).
      char *const write_chunk =
          write_head + (Cfg::kZeroChunks ? 0 : static_cast<int64_t>(d0) * dstate * esize);
      if constexpr (Cfg::kFastSr) {
        // Here sr holds (rounds > 0 and write). Every row truncated and stored, the chunk's
        // magnitudes tested once; a flagged chunk is converted again exactly and stored over.
        uint32_t hmax = sr_max_init;
        const uint32_t lo = static_cast<uint32_t>(sr_chunk);
        const typename Cfg::RoundTwo rt{rt_z, rt_w};
#pragma unroll
        for (int r = 0; r < U; ++r) {
          uint32_t bits[K] = {};
#pragma unroll
          for (int i = 0; i < K; i += cfg.sr_group()) {
            const uint32_t dist = static_cast<uint32_t>(cfg.col(lane, i) - cfg.col(lane, 0));
            const U32x4 w = cfg.philox_lo(lo + static_cast<uint32_t>(r * dstate) + dist, key, rt);
            const uint32_t w01 =
                sr_pair_fast_low<Cfg::kFtzFlush, Cfg::kMadHiAdd, Cfg::kHalfAcc>(
                    s[r][i], s[r][i + 1], w.x, w.y, hmax);
            bits[i] = w01 & 0xffffu;
            bits[i + 1] = w01 >> 16;
            if (cfg.sr_group() == 4) {
              const uint32_t w23 =
                  sr_pair_fast_low<Cfg::kFtzFlush, Cfg::kMadHiAdd, Cfg::kHalfAcc>(
                  s[r][i + 2], s[r][i + 3], w.z, w.w, hmax);
              bits[i + 2] = w23 & 0xffffu;
              bits[i + 3] = w23 >> 16;
            }
          }
          cfg.store_state(write_chunk + r * dstate * esize, lane, bits);
        }
        if (sr_chunk_bad<Cfg::kHalfAcc>(hmax, nan_probe)) {  // rare: saturated, Inf, NaN, 2^32 crossing
#pragma unroll
          for (int r = 0; r < U; ++r) {
            uint32_t bits[K] = {};
            uint32_t rnd[K] = {};
            sr_words(cfg, cfg.load_key(), sr_chunk + static_cast<uint64_t>(r * dstate), lane, rnd);
#pragma unroll
            for (int i = 0; i < K; i += 2) {
              const uint32_t word = sr_pair_exact(s[r][i], s[r][i + 1], rnd[i] & 0x1fffu,
                                                  rnd[i + 1] & 0x1fffu);
              bits[i] = word & 0xffffu;
              bits[i + 1] = word >> 16;
            }
            cfg.store_state(write_chunk + r * dstate * esize, lane, bits);
          }
        }
      } else {
      // An int16 state: the chunk's rows' encode factors first (their warp reductions
      // independent of one another), then the decode scales in one store (lane r: row r's; rows
      // past d_end are not stored) and each row quantised.
      [[maybe_unused]] float enc[U];
      if constexpr (scaled_state<Cfg>()) {
#pragma unroll
        for (int r = 0; r < U; ++r) enc[r] = i16_encode_row(cfg, s[r], write_scale != nullptr);
        if (write_scale != nullptr && lane < U && (Cfg::kFullChunks || d0 + lane < d_end)) {
          float e = enc[0];
#pragma unroll
          for (int r = 1; r < U; ++r) e = lane == r ? enc[r] : e;
          write_scale[d0 + lane] = rcp_approx(e);
        }
      }
#pragma unroll
      for (int r = 0; r < U; ++r) {
        const int d = d0 + r;
        if (!Cfg::kFullChunks && d >= d_end) break;  // warp-uniform
        uint32_t bits[K] = {};
        if constexpr (scaled_state<Cfg>()) {
          quantize_i16_row(cfg, s[r], bits, enc[r]);
        } else if (sr) {
          uint32_t rnd[K] = {};
          uint32_t flags = 0;
          if constexpr (run_words<Cfg>())
            sr_run_words(cfg, key, sr_chunk + static_cast<uint64_t>(r * dstate), lane, rnd);
          else
            sr_words(cfg, key, sr_chunk + static_cast<uint64_t>(r * dstate), lane, rnd);
#pragma unroll
          for (int i = 0; i < K; i += 2) {
            if (i < cfg.ncols()) {
              const uint32_t word = sr_pair_fast(s[r][i], s[r][i + 1], rnd[i] & 0x1fffu,
                                                 rnd[i + 1] & 0x1fffu, flags);
              bits[i] = word & 0xffffu;
              bits[i + 1] = word >> 16;
            }
          }
          if (sr_needs_exact(flags)) {  // rare: zero, subnormal, saturated, Inf or NaN results
#pragma unroll
            for (int i = 0; i < K; i += 2) {
              if (i < cfg.ncols()) {
                // The generic kernel converts under the call's rule (sr_pair_fast's unflagged
                // pairs are the same under both, see there); the one-row hot kernels, only ever
                // launched for 0.7.2, keep the 0.7.2 formula without reading the rule.
                uint32_t word;
                if constexpr (sr_rule_at_run_time<Cfg>())
                  word = sr_pair_exact_rule(s[r][i], s[r][i + 1], rnd[i] & 0x1fffu,
                                            rnd[i + 1] & 0x1fffu, a.sr_rule);
                else
                  word = sr_pair_exact(s[r][i], s[r][i + 1], rnd[i] & 0x1fffu,
                                       rnd[i + 1] & 0x1fffu);
                bits[i] = word & 0xffffu;
                bits[i + 1] = word >> 16;
              }
            }
          }
        } else {
#pragma unroll
          for (int i = 0; i < K; ++i)
            if (i < cfg.ncols()) bits[i] = cfg.round_nearest(s[r][i]);
        }
        cfg.store_state(write_chunk + (Cfg::kZeroChunks ? static_cast<int64_t>(d) : r) * dstate * esize,
                        lane, bits);
      }
      }
    }
    cur = next;
    sr_chunk += static_cast<uint64_t>(U * dstate);
    if constexpr (kOutPtr) out_p += U;
  }
}

// The register budget per thread of Cfg::kMinBlocksPerSM 4-warp blocks, for blocks of
// Cfg::kBlockWarps warps.
template <class Cfg>
__global__ void __launch_bounds__(32 * Cfg::kBlockWarps,
                                  Cfg::kMinBlocksPerSM * kWarpsPerBlock / Cfg::kBlockWarps > 0
                                      ? Cfg::kMinBlocksPerSM * kWarpsPerBlock / Cfg::kBlockWarps
                                      : 1) ssu_kernel(const Args a) {
  ssu_body<Cfg>(a);
}

// The kernel of an int16 state (Cfg: DynI16Config, or a compiled-in I16State), its decode
// scales a second argument (a template, so that only the unit that launches it instantiates it).
// The register budget as ssu_kernel's.
template <class Cfg>
__global__ void __launch_bounds__(32 * Cfg::kBlockWarps,
                                  Cfg::kMinBlocksPerSM * kWarpsPerBlock / Cfg::kBlockWarps > 0
                                      ? Cfg::kMinBlocksPerSM * kWarpsPerBlock / Cfg::kBlockWarps
                                      : 1) ssu_kernel_scaled(const Args a, const ScaleArgs sc) {
  static_assert(scaled_state<Cfg>(), "ssu_kernel_scaled: an int16-state config");
  ssu_body<Cfg>(a, sc);
}

// The compiled-in kernels for a BF16 or an F32 state without SR (ssu_stp_states.cu): the hot
// kernels' code of a family with the state converted from and to bf16, or in fp32 with
// FlashInfer's lane columns for 4-byte elements, launched for a plan of ssu.cu. launch_hot_i16
// (ssu_stp_states_i16.cu): the same for an I16 state, dequantised with and quantised into its
// decode scales `sc`.
enum class StpStateFamily {
  kDim64,  // HotConfig: head dim 64, dstate 128
  kRtDim,  // HotDimConfig: another head dim, dstate 128
  kDs64,   // HotDsConfig<64>
  kDs256,  // HotDsConfig<256>
};
int launch_hot_state(const Args &a, StpStateFamily family, unsigned blocks, int wpb,
                     cudaStream_t st, int64_t rows, int small_rows, bool simple);
int launch_hot_i16(const Args &a, StpStateFamily family, unsigned blocks, int wpb,
                   cudaStream_t st, int64_t rows, int small_rows, bool simple,
                   const ScaleArgs &sc);

// The compiled-in kernels for fp16 inputs and weights (ssu_with_f16_inputs.cu: F16Inputs over
// each family; an fp16 state with every round count, a bf16 or an fp32 state without SR) of a
// plan of ssu.cu. Defined only in a build with them (launch.h: kF16InputKernels), and called
// only there.
int launch_hot_f16_inputs(const Args &a, StpStateFamily family, unsigned blocks, int wpb,
                          cudaStream_t st, int64_t rows, int small_rows, bool simple);
// The generic kernel at an uneven dstate (96, 160, 192, 224; DynUnevenConfig; ssu_uneven.cu).
int launch_uneven(const Args &a, unsigned blocks, int warps_per_block, bool wide,
                  cudaStream_t stream);
// The generic kernel above dstate 256 (DynLongConfig per state dtype; with `f32_inputs`,
// fp32 inputs over an fp32 state, DynLongF32InputsConfig; ssu_uneven.cu).
int launch_long(const Args &a, unsigned blocks, int warps_per_block, bool f32_inputs,
                cudaStream_t stream);
// The generic kernel of an int16 state at an uneven dstate (DynUnevenI16Config; at 512,
// long_dstate, DynLongI16Config; ssu_uneven.cu).
int launch_uneven_i16(const Args &a, const ScaleArgs &sc, unsigned blocks, int warps_per_block,
                      cudaStream_t stream);
// The generic kernel of an fp32 state with fp32 inputs (RowForms over DynConfig, or at an
// uneven dstate DynUnevenConfig, DynUnevenWideConfig with `wide`; ssu_uneven.cu).
int launch_f32_inputs(const Args &a, unsigned blocks, int warps_per_block, bool uneven, bool wide,
                      cudaStream_t stream);

}  // namespace ssu
}  // namespace mamba_ssu
