// ssu_hz.cuh — the single-token selective-state-update in FlashInfer's "horizontal" mapping
// (FlashInfer 0.7.2's horizontal kernel, bit for bit), as templated device code: the kernel's
// arguments (hz::Args), the per-dtype element access (hz::Elem), the tile loop (hz_body) and the
// kernel template (hz_kernel). Included by ssu_single_hz.cu (host: planning and dispatch). Built on
// fp32_ops.cuh (FlashInfer's fp32 operations), sr.cuh (the stochastic-rounding conversion),
// philox_words.cuh (the Philox key schedule) and loads.cuh (dtype conversions).
//
// What decides the bits (docs/flashinfer-ssu.md, "The horizontal mapping"): FlashInfer's
// kernel gives each state row d two threads, "members" m = 0 and 1. The row's columns are
// processed in stages of 64 bytes (32 columns of a 2-byte state, 16 of an fp32 one); a stage is
// 16 four-byte words, and member m visits the words (j + 8m + (d mod 16) / 2) mod 16 for
// j = 0..7 in that order (a 2-byte word: its low column, then its high one). Each thread keeps
// one fp32 partial sum over its columns, stage after stage: acc = fma(C, s', acc) from acc = 0;
// the row's y is fma(D, x, rn(acc_0 + acc_1)), then the gate. The new state value of an
// element is s' = fma(x, rn(B * dt'), rn(dA * s)) (the contraction FlashInfer's compiler chose,
// read from the SASS of its sm_90 horizontal kernels; the simple and vertical layouts have
// fma(dA, s, rn(x * rn(B * dt')))). With stochastic rounding (fp16 state), a thread draws one
// Philox call per two of its words (j even), at the element offset of the first column of
// word j: words j and j + 1 take the call's outputs 0, 1 and 2, 3.
//
// Work layout: FlashInfer's thread-to-row assignment, without its producer warp and TMA. A warp
// serves one (b, h) and a run of rows_per_warp rows (a multiple of 16): lane l is member l / 16
// of rows 16 i + l mod 16 of the run, so that every thread's rotation is a function of its lane
// and the row pairs of a warp are complete (only warp-level synchronisation). The rows go
// through shared memory in tiles of 16 rows by one stage (1 KiB): a tile is loaded with
// cp.async (4 or 8 tiles ahead, per warp), each lane reads its rotated words from it
// (bank-conflict free, as FlashInfer's rotation was designed to be), writes the new words back
// in place, and the warp stores the tile to the write slot with 16-byte stores. On the calls
// with 8 tiles ahead the copies and stores go by groups of 4 stages, each warp instruction
// covering whole rows' 256 contiguous bytes (hz_kernel_grouped). B * dt' and C are staged once
// per warp as fp32 in shared memory. The Philox key schedule is computed once per block (the
// seed is the call's).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "fp32_ops.cuh"
#include "include/mamba_ssu.h"
#include "loads.cuh"
#include "philox.cuh"
#include "philox_words.cuh"
#include "sr.cuh"

namespace mamba_ssu {
namespace hz {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreadsPerBlock = 32 * kWarpsPerBlock;
constexpr unsigned kFullMask = 0xffffffffu;
// A tile: 16 rows (a row's two members in lanes l and l + 16) by one stage of 64 bytes.
constexpr int kTileRows = 16;
constexpr int kStageBytes = 64;
constexpr int kTileBytes = kTileRows * kStageBytes;
// Tiles a warp keeps in flight (Args::tiles_in_flight, chosen per call by the launcher): 4 (4 KiB
// per warp) or 8. Eight keep more bytes in flight per SM and cost occupancy (the shared memory
// of 6 instead of 8 blocks per SM): faster on large calls without stochastic rounding, slower on
// small ones and with rounding (docs/perf-notes.md, "The horizontal kernel: tiles in flight").
constexpr int kTilesInFlightSmall = 4;
constexpr int kTilesInFlightLarge = 8;

// Shared memory of one warp: its tiles, then B * dt' and C as fp32 (dstate each).
__host__ __device__ constexpr int warp_smem_bytes(int dstate, int tiles_in_flight) {
  return tiles_in_flight * kTileBytes + 2 * dstate * 4;
}

// Most Philox rounds of a compiled-in kernel (its key schedule table).
constexpr int kMaxKeyRounds = 10;
// Shared memory of a block (all dynamic: the kernels declare no static shared variables, so
// that linking them leaves the other kernels' shared-memory layouts as they were): the block's
// seed and key schedule table, then each warp's part.
constexpr int kBlockHeaderBytes = 128;
static_assert(8 + 2 * kMaxKeyRounds * 4 <= kBlockHeaderBytes, "the block header");
__host__ __device__ constexpr int block_smem_bytes(int dstate, int tiles_in_flight) {
  return kBlockHeaderBytes + kWarpsPerBlock * warp_smem_bytes(dstate, tiles_in_flight);
}

// Everything the kernel reads, filled and validated by the host launcher (ssu_single_hz.cu). Strides
// in elements.
struct Args {
  const void *x;
  const void *dt;
  const void *dt_bias;  // optional
  const float *A;
  const void *B;
  const void *C;
  const void *D;  // optional
  const void *z;  // optional
  void *out;
  void *state;
  const void *state_batch_indices;      // optional
  const void *dst_state_batch_indices;  // optional
  // The seed (checks.h: lower_seed).
  const int64_t *rand_seed;
  const uint64_t *gen_seed;
  const uint64_t *gen_offset;
  uint64_t seed_offset;
  uint64_t generator_seed;
  int64_t *seed_next;  // optional: the extra first block (block 0) stores the next call's seed
  int32_t seed_source;
  int32_t philox_rounds;
  int32_t sr_rule;

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
  int64_t total_warps;  // batch * nheads * warps_per_head

  uint32_t nheads;
  uint32_t heads_per_group;  // nheads / ngroups
  uint32_t warps_per_head;   // dim / rows_per_warp
  int32_t rows_per_warp;     // a multiple of kTileRows dividing dim
  int32_t dim;               // a multiple of 64, at most 256
  int32_t dstate;            // a multiple of 32 from 64 to 256 (of 16 from 32: an fp32 state)
  int32_t tiles_in_flight;   // kTilesInFlightSmall or kTilesInFlightLarge
  int32_t input_dtype;       // read where the config's inputs are not bf16
  int32_t weight_dtype;
  int32_t index_dtype;
  int32_t dt_softplus;
  int32_t update_state;
};

// The element types of a kernel: the state's (kState, compile-time: its bytes fix the stage
// width and the rotation), and the inputs' and weights' (bf16 at compile time when kBf16, fp16
// when kF16In, else read from Args).
template <int kState, bool kBf16, bool kF16In = false>
struct Elem {
  static_assert(!(kBf16 && kF16In), "one compiled-in input dtype");
  // Whether the inputs' dtype is compiled in, and the widening and rounding of one element.
  static constexpr bool kCompiled = kBf16 || kF16In;
  __device__ static float widen(uint32_t bits) {
    return kF16In ? ssu::half_bits_to_float(bits) : ssu::bf16_bits_to_float(bits);
  }
  __device__ static uint32_t narrow(float v) {
    return kF16In ? ssu::float_to_half_bits_rn(v) : ssu::float_to_bf16_bits_rn(v);
  }
  static constexpr int kStateBytes = kState == MAMBA_SSU_F32 ? 4 : 2;
  // Columns per stage: 32 (2-byte state) or 16 (fp32).
  static constexpr int kStageCols = kStageBytes / kStateBytes;

  // An input element's bits (2 or 4 bytes), loaded ahead and widened where it is used
  // (input_value): the load's latency is not waited for at the load.
  __device__ static uint32_t load_input_bits(const Args &a, const void *p, int64_t idx) {
    if constexpr (kCompiled) {
      return static_cast<const unsigned short *>(p)[idx];
    } else {
      return a.input_dtype == MAMBA_SSU_F32 ? __float_as_uint(static_cast<const float *>(p)[idx])
                                            : static_cast<const unsigned short *>(p)[idx];
    }
  }
  __device__ static float input_value(const Args &a, uint32_t bits) {
    if constexpr (kCompiled) {
      return widen(bits);
    } else {
      return a.input_dtype == MAMBA_SSU_F32   ? __uint_as_float(bits)
             : a.input_dtype == MAMBA_SSU_F16 ? ssu::half_bits_to_float(bits)
                                              : ssu::bf16_bits_to_float(bits);
    }
  }
  __device__ static float load_input(const Args &a, const void *p, int64_t idx) {
    if constexpr (kCompiled) {
      return widen(static_cast<const unsigned short *>(p)[idx]);
    } else {
      return ssu::load_float(p, idx, a.input_dtype);
    }
  }
  __device__ static float load_weight(const Args &a, const void *p, int64_t idx) {
    if constexpr (kCompiled) {
      return widen(static_cast<const unsigned short *>(p)[idx]);
    } else {
      return ssu::load_float(p, idx, a.weight_dtype);
    }
  }
  __device__ static void store_out(const Args &a, int64_t idx, float v) {
    if constexpr (kCompiled) {
      static_cast<unsigned short *>(a.out)[idx] = static_cast<unsigned short>(narrow(v));
    } else {
      ssu::store_float(a.out, idx, a.input_dtype, v);
    }
  }
  // The two elements of a 2-byte state word (low half first).
  __device__ static float lo(uint32_t w) {
    return kState == MAMBA_SSU_F16 ? ssu::half_bits_to_float(w & 0xffffu)
                                   : ssu::bf16_bits_to_float(w & 0xffffu);
  }
  __device__ static float hi(uint32_t w) {
    return kState == MAMBA_SSU_F16 ? ssu::half_bits_to_float(w >> 16) : __uint_as_float(w & 0xffff0000u);
  }
  // Two values rounded to nearest into a 2-byte state word.
  __device__ static uint32_t pack_rn(float v0, float v1) {
    if constexpr (kState == MAMBA_SSU_F16) {
      return ssu::float_to_half_bits_rn(v0) | (ssu::float_to_half_bits_rn(v1) << 16);
    } else {
      return ssu::float_to_bf16_bits_rn(v0) | (ssu::float_to_bf16_bits_rn(v1) << 16);
    }
  }
};

// 16 bytes from global memory into shared memory at shared-window address d, asynchronously
// (cp.async, L2 only); with zero_fill the 16 bytes are zeros and nothing is read (the source
// operand size 0).
__device__ __forceinline__ void cp_async16(uint32_t d, const void *src, bool zero_fill) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src),
               "r"(zero_fill ? 0 : 16)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// The Philox key of the call: the compiled-in round counts read a block's schedule table
// (philox_words.cuh: key words in uniform registers); kRounds < 0 keeps (k0, k1) and runs the
// count at run time.
template <int kRounds>
struct Key {
  static constexpr int kTableRounds = kRounds > 0 ? kRounds : 1;
  ssu::KeySchedule<kTableRounds> sched;
  uint32_t k0, k1;
  __device__ U32x4 philox(U32x4 c, int rounds) const {
    if constexpr (kRounds > 0) {
      (void)rounds;
      return ssu::philox_scheduled<kRounds>(c, sched);
    } else {
      return philox4x32_dyn(c, k0, k1, rounds);
    }
  }
};

// Two stochastically rounded fp16 words of four new state values n[0..3] (word 0: n[0] low,
// n[1] high; word 1: n[2], n[3]) with the four outputs of one Philox call: the fast pair
// conversion, or (exact) the call's rule's exact formula.
template <bool kExact>
__device__ __forceinline__ void sr_two_words(const float *n, U32x4 r, int32_t rule,
                                             uint32_t &w0, uint32_t &w1, uint32_t &flags) {
  if constexpr (kExact) {
    w0 = ssu::sr_pair_exact_rule(n[0], n[1], r.x & 0x1fffu, r.y & 0x1fffu, rule);
    w1 = ssu::sr_pair_exact_rule(n[2], n[3], r.z & 0x1fffu, r.w & 0x1fffu, rule);
  } else {
    w0 = ssu::sr_pair_fast(n[0], n[1], r.x & 0x1fffu, r.y & 0x1fffu, flags);
    w1 = ssu::sr_pair_fast(n[2], n[3], r.z & 0x1fffu, r.w & 0x1fffu, flags);
  }
}

// kAnyStages: a row's stage count need not be a power of two (dstates 96, 160, 192, 224: 3, 5, 6
// or 7 stages of a 2-byte state, twice as many of an fp32 one; an fp32 state at 32 to 240: 2 to
// 15; above 256, checks.h: long_dstate, 9 to 16 of a 2-byte state and 17 to 32 of an fp32 one;
// the kernels of ssu_uneven.cu): the tile's row block and stage by division instead of a
// shift and a mask. Off, the code is the one the other kernels were built
// with.
template <int kState, int kRounds, bool kBf16, bool kAnyStages = false, bool kGrouped = false,
          bool kF16In = false>
__device__ __forceinline__ void hz_body(const Args &a) {
  using E = Elem<kState, kBf16, kF16In>;
  constexpr bool kF16 = kState == MAMBA_SSU_F16;
  constexpr bool kTwoByte = E::kStateBytes == 2;
  static_assert(kRounds <= kMaxKeyRounds, "the key table holds kMaxKeyRounds rounds");
  extern __shared__ __align__(16) unsigned char hz_smem[];
  unsigned char *const smem = hz_smem;
  uint64_t &block_seed = *reinterpret_cast<uint64_t *>(smem);
  uint32_t *const key_table = reinterpret_cast<uint32_t *>(smem + 8);

  // A fused chain's next link: the grid's extra first block stores the stock draw that follows
  // this call's position and does nothing else (as the simple and vertical kernels do).
  if (a.seed_next != nullptr && blockIdx.x == 0) {  // block-uniform
    if (threadIdx.x == 0)
      store_next_link(a.seed_next, a.gen_seed, a.gen_offset, a.generator_seed, a.seed_offset);
    return;
  }
  const uint64_t block = blockIdx.x - (a.seed_next != nullptr ? 1u : 0u);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int rounds = !kF16 ? 0 : kRounds >= 0 ? kRounds : a.philox_rounds;

  // The warp's (b, h) and its part of the head. The grid has fewer than 2^31 warps (the
  // launcher's bound), so 32-bit divisions do. A warp past the grid's end takes warp 0's
  // (b, h), so that the loads below stay in bounds; it returns after the block's barriers.
  const uint64_t gw = block * kWarpsPerBlock + static_cast<uint64_t>(warp);
  const bool live = gw < static_cast<uint64_t>(a.total_warps);  // warp-uniform
  const uint32_t gw32 = live ? static_cast<uint32_t>(gw) : 0u;
  const uint32_t bh = gw32 / a.warps_per_head;
  const int part = static_cast<int>(gw32 - bh * a.warps_per_head);
  const uint32_t b32 = bh / a.nheads;
  const int64_t b = b32;
  const int64_t h = bh - b32 * a.nheads;
  const int dim = a.dim;
  const int dstate = a.dstate;
  const int rb0 = part * (a.rows_per_warp / kTileRows);  // first tile row block of the warp
  const int nrb = a.rows_per_warp / kTileRows;
  const int g = lane & 15;
  const int m = lane >> 4;
  const int64_t x_row = b * a.x_stride_batch + h * dim;
  const int64_t z_row = b * a.z_stride_batch + h * dim;
  const bool has_z = a.z != nullptr;

  // The prologue's loads, issued before anything waits for one: the slot indices, the lane's x
  // and z of the first row block (as bits, widened at use) and the seed.
  const int64_t read_slot =
      a.state_batch_indices != nullptr
          ? ssu::load_index(a.state_batch_indices, b * a.state_batch_indices_stride,
                            a.index_dtype)
          : b;
  const int64_t write_slot =
      a.dst_state_batch_indices != nullptr
          ? ssu::load_index(a.dst_state_batch_indices, b * a.dst_state_batch_indices_stride,
                            a.index_dtype)
          : read_slot;
  // The per-head scalars: here in the kernels that may round stochastically (their loads then
  // overlap the seed's barriers), after the tile loads are issued in the others (measured
  // faster there: docs/perf-notes.md, "The horizontal kernel: tiles in flight").
  constexpr bool kEarlyScalars = kF16 && kRounds != 0;
  float dt = 0.0f, dt_bias = 0.0f, A_h = 0.0f, D = 0.0f;
  auto load_scalars = [&]() {
    dt = E::load_weight(a, a.dt, b * a.dt_stride_batch + h);
    dt_bias = a.dt_bias != nullptr ? E::load_weight(a, a.dt_bias, h) : 0.0f;
    A_h = a.A[h];
    D = a.D != nullptr ? E::load_weight(a, a.D, h) : 0.0f;
  };
  if constexpr (kEarlyScalars) load_scalars();
  uint32_t x_bits = E::load_input_bits(a, a.x, x_row + rb0 * kTileRows + g);
  uint32_t z_bits = has_z ? E::load_input_bits(a, a.z, z_row + rb0 * kTileRows + g) : 0u;
  // The kernels of any stage count that may round stochastically, bf16 inputs compiled in:
  // B and C of the head's group, the lane's columns lane + 32 i for i < kPreCols, loaded here
  // as bits, so that their latency overlaps the slot index's and the seed's instead of
  // following dt's; staged below once dt' is known (columns from 256 on, above dstate 256, by
  // the loop there). Measured faster only in these kernels (docs/perf-notes.md, "the
  // horizontal kernel with SR: two Philox calls at a time"); the others load B and C there.
  constexpr bool kPreloadBC = kBf16 && kEarlyScalars && kAnyStages;
  constexpr int kPreCols = kPreloadBC ? 8 : 0;
  uint32_t b_bits[kPreCols > 0 ? kPreCols : 1], c_bits[kPreCols > 0 ? kPreCols : 1];
  if constexpr (kPreloadBC) {
    const int64_t brow = b * a.B_stride_batch + (h / a.heads_per_group) * dstate;
    const int64_t crow = b * a.C_stride_batch + (h / a.heads_per_group) * dstate;
#pragma unroll
    for (int i = 0; i < kPreCols; ++i) {
      const int n = lane + 32 * i;
      b_bits[i] = n < dstate ? E::load_input_bits(a, a.B, brow + n) : 0u;
      c_bits[i] = n < dstate ? E::load_input_bits(a, a.C, crow + n) : 0u;
    }
  }
  int64_t seed_at_pointer = 0;
  if (kF16 && rounds > 0 && threadIdx.x == 0 && a.seed_source == MAMBA_SSU_SEED_POINTER)
    seed_at_pointer = *a.rand_seed;

  // The call's seed and key schedule, once per block (every thread reaches the barriers: no
  // warp has returned yet).
  Key<kRounds> key{};
  if (kF16 && rounds > 0) {  // grid-uniform
    if (threadIdx.x == 0) {
      uint64_t seed;
      if (a.seed_source == MAMBA_SSU_SEED_POINTER) {
        seed = static_cast<uint64_t>(seed_at_pointer);
      } else if (a.seed_source == MAMBA_SSU_SEED_FROM_GENERATOR) {
        seed = static_cast<uint64_t>(torch_seed_draw(*a.gen_seed, *a.gen_offset + a.seed_offset));
      } else {
        seed = static_cast<uint64_t>(torch_seed_draw(a.generator_seed, a.seed_offset));
      }
      block_seed = seed;
    }
    __syncthreads();
    const uint64_t seed = block_seed;
    if constexpr (kRounds > 0) {
      ssu::store_key_schedule<kRounds>(key_table, static_cast<int>(threadIdx.x), seed);
      __syncthreads();
      key.sched = ssu::load_key_schedule<kRounds>(key_table);
    } else {
      key.k0 = static_cast<uint32_t>(seed);
      key.k1 = static_cast<uint32_t>(seed >> 32);
    }
  }
  if (!live) return;  // warp-uniform; no barrier follows

  // Stages per row: dstate * state bytes / 64 (2, 4 or 8 for a 2-byte state; 4, 8 or 16 fp32).
  const int nst = dstate * E::kStateBytes / kStageBytes;
  const int nst_log2 = __ffs(nst) - 1;
  const int ntiles = nrb * nst;

  // Slots (loaded above). Out-of-range slots are treated like pads (never dereferenced).
  const bool pad =
      read_slot == a.pad_slot_id || read_slot < 0 || read_slot >= a.state_cache_size;
  const bool write = a.update_state != 0 && !pad && write_slot != a.pad_slot_id &&
                     write_slot >= 0 && write_slot < a.state_cache_size;
  const bool sr = kF16 && rounds > 0 && write;

  const int64_t head_elems = h * dim * dstate;
  const int64_t row_bytes = static_cast<int64_t>(dstate) * E::kStateBytes;
  char *const state = static_cast<char *>(a.state);
  // A pad's tiles are zero-filled without a read; its read head is any valid address.
  const char *read_head =
      pad ? state : state + (read_slot * a.state_stride_batch + head_elems) * E::kStateBytes;
  char *write_head =
      write ? state + (write_slot * a.state_stride_batch + head_elems) * E::kStateBytes : nullptr;
  // Philox element offset of the head block: READ slot, 64-bit wrap-around.
  const uint64_t sr_head =
      static_cast<uint64_t>(read_slot) * static_cast<uint64_t>(a.state_stride_batch) +
      static_cast<uint64_t>(head_elems);

  const int tif = a.tiles_in_flight;  // 4 or 8
  unsigned char *const wsm = smem + kBlockHeaderBytes + warp * warp_smem_bytes(dstate, tif);
  unsigned char *const tiles = wsm;
  // B * dt' and C interleaved per state word, so that one load gives a word's both: a 2-byte
  // state's word w of stage k (columns n = 32 k + 2 w, n + 1) at float4 16 k + w, (B dt'[n],
  // B dt'[n + 1], C[n], C[n + 1]); an fp32 state's column n at float2 n, (B dt'[n], C[n]).
  unsigned char *const bc = wsm + tif * kTileBytes;
  constexpr int kBcWordBytes = kTwoByte ? 16 : 8;

  // Tile t (row block t / nst of the warp, stage t mod nst) into buffer t mod tif:
  // lane l copies 16-byte chunks l and l + 32 (chunk c: row c / 4, bytes 16 (c mod 4) of the
  // stage), from a source pointer that advances tile by tile. One commit group per call, empty
  // past the last tile, so that waiting for all but the newest tif - 1 groups waits
  // for tile t.
  const int64_t chunk_src = (lane >> 2) * row_bytes + 16 * (lane & 3);
  const char *src = read_head + rb0 * kTileRows * row_bytes + chunk_src;  // tile 0's, chunk lane
  const int64_t row_block_step = kTileRows * row_bytes - nst * kStageBytes;
  int issued = 0;
  // The lane's first chunk in the tile buffers, as a shared-window address (computed once).
  const uint32_t tiles_lane =
      static_cast<uint32_t>(__cvta_generic_to_shared(tiles)) + 16u * static_cast<uint32_t>(lane);
  auto issue = [&]() {
    if (issued < ntiles) {
      const uint32_t buf = tiles_lane + (issued & (tif - 1)) * kTileBytes;
      cp_async16(buf, pad ? read_head : src, pad);
      cp_async16(buf + 512, pad ? read_head : src + 8 * row_bytes, pad);
      if constexpr (kAnyStages) {
        src += issued % nst == nst - 1 ? row_block_step + kStageBytes : kStageBytes;
      } else {
        src += ((issued & (nst - 1)) == nst - 1) ? row_block_step + kStageBytes : kStageBytes;
      }
    }
    ++issued;
    cp_async_commit();
  };
  // kGrouped (the calls with 8 tiles in flight: rows of 4 stages or more): the copies go by
  // groups of kGroup = 4 consecutive stages of a row block (one commit group each, a ring of two
  // groups = 8 tiles). A lane's chunks c = lane + 32 i, i < 8, are row c / 16 and 16-byte part
  // c mod 16 of the group's 4 stages, so that a warp's copy instruction covers 2 whole rows'
  // 256 contiguous bytes instead of 8 rows' 64; the group's new words go back to the write slot
  // the same way once its last tile is computed.
  constexpr int kGroup = 4;
  const int grp_q = lane & 15;   // the lane's 16-byte part of a row's 4 stages
  const int grp_r0 = lane >> 4;  // the lane's first row (then every second)
  const int32_t grp_step = 2 * static_cast<int32_t>(row_bytes);  // an instruction's 2 rows
  // The lane's first chunk in the tile buffers: its byte offset, and as a shared-window address.
  const int grp_tile_lane = (grp_q >> 2) * kTileBytes + grp_r0 * kStageBytes + 16 * (grp_q & 3);
  const uint32_t grp_smem_lane = static_cast<uint32_t>(__cvta_generic_to_shared(tiles)) +
                                 static_cast<uint32_t>(grp_tile_lane);
  const int ngroups = ntiles / kGroup;
  // The lane's first chunk of the current group in the read slot (and below, the write slot).
  const int64_t grp_lane_off =
      (static_cast<int64_t>(rb0) * kTileRows + grp_r0) * row_bytes + 16 * grp_q;
  const char *grp_src = read_head + grp_lane_off;
  int grp_issued = 0;
  // The step from a group's chunks to the next group's: 4 stages on, or the next row block.
  auto grp_advance = [&](int first_tile) -> int32_t {
    return ((first_tile & (nst - 1)) + kGroup == nst)
               ? kTileRows * static_cast<int32_t>(row_bytes) - (nst - kGroup) * kStageBytes
               : kGroup * kStageBytes;
  };
  auto issue_group = [&]() {
    if (grp_issued < ngroups) {
      const uint32_t base = grp_smem_lane + (grp_issued & 1) * kGroup * kTileBytes;
#pragma unroll
      for (int i = 0; i < 2 * kGroup; ++i)
        cp_async16(base + i * 2 * kStageBytes, pad ? read_head : grp_src + i * grp_step, pad);
      grp_src += grp_advance(grp_issued * kGroup);
    }
    ++grp_issued;
    cp_async_commit();
  };
  if constexpr (kGrouped) {
    issue_group();
    issue_group();
  } else {
    for (int t = 0; t < tif; ++t) issue();
  }

  // Per (b, h) scalars, FlashInfer's operations (fp32_ops.cuh).
  if constexpr (!kEarlyScalars) load_scalars();
  if (a.dt_bias != nullptr) dt = __fadd_rn(dt, dt_bias);
  if (a.dt_softplus != 0 && dt <= 20.0f) dt = ssu::softplus(dt);  // NaN skips
  const float dA = ssu::ex2_approx(__fmul_rn(__fmul_rn(A_h, dt), ssu::kL2E));

  // B * dt' and C of the head's group into shared memory.
  {
    const int64_t grp = h / a.heads_per_group;
    const int64_t brow = b * a.B_stride_batch + grp * dstate;
    const int64_t crow = b * a.C_stride_batch + grp * dstate;
    float *const f = reinterpret_cast<float *>(bc);
#pragma unroll
    for (int i = 0; i < kPreCols; ++i) {
      const int n = lane + 32 * i;
      if (n < dstate) {
        const float bv = __fmul_rn(E::input_value(a, b_bits[i]), dt);
        const float cv = E::input_value(a, c_bits[i]);
        const int j = kTwoByte ? 4 * (n >> 1) + (n & 1) : 2 * n;
        f[j] = bv;
        f[j + (kTwoByte ? 2 : 1)] = cv;
      }
    }
    for (int n = lane + 32 * kPreCols; n < dstate; n += 32) {
      const float bv = __fmul_rn(E::load_input(a, a.B, brow + n), dt);
      const float cv = E::load_input(a, a.C, crow + n);
      const int i = kTwoByte ? 4 * (n >> 1) + (n & 1) : 2 * n;
      f[i] = bv;
      f[i + (kTwoByte ? 2 : 1)] = cv;
    }
  }

  // This lane: member m of rows 16 i + g; the byte offsets, within a tile row, of the 8 words
  // it visits in order (word (j + 8 m + g / 2) mod 16 for j = 0..7: lane constants).
  const int rot = 8 * m + (g >> 1);
  uint32_t woff[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) woff[j] = 4u * static_cast<uint32_t>((j + rot) & 15);
  const int64_t out_row = b * a.out_stride_batch + h * dim;
  // Where lane l's chunks of tile t go (write_head: the chunks' places in the write slot).
  char *dst = write ? write_head + rb0 * kTileRows * row_bytes + chunk_src : nullptr;
  char *grp_dst = write ? write_head + grp_lane_off : nullptr;

  // x and z of the lane's row in the current row block (bits of the next block loaded ahead).
  float x = 0.0f, zv = 0.0f, acc = 0.0f;

  for (int t = 0; t < ntiles; ++t) {
    int rb, k;
    if constexpr (kAnyStages) {
      rb = t / nst;
      k = t - rb * nst;
    } else {
      rb = t >> nst_log2;
      k = t & (nst - 1);
    }
    const int d = (rb0 + rb) * kTileRows + g;
    if (k == 0) {
      x = E::input_value(a, x_bits);
      zv = has_z ? E::input_value(a, z_bits) : 0.0f;
      acc = 0.0f;
      if (rb + 1 < nrb) {
        x_bits = E::load_input_bits(a, a.x, x_row + d + kTileRows);
        if (has_z) z_bits = E::load_input_bits(a, a.z, z_row + d + kTileRows);
      }
    }
    if constexpr (kGrouped) {
      if ((t & (kGroup - 1)) == 0) {  // a group's first tile: its copies done
        cp_async_wait<1>();
        __syncwarp();
      }
    } else {
      if (tif == kTilesInFlightLarge) {  // grid-uniform
        cp_async_wait<kTilesInFlightLarge - 1>();
      } else {
        cp_async_wait<kTilesInFlightSmall - 1>();
      }
      __syncwarp();
    }
    // The offsets stay in registers (an empty asm that "changes" them each tile): left alone,
    // the compiler recomputes each from the lane index at every use, 3 instructions a word.
#pragma unroll
    for (int j = 0; j < 8; ++j) asm volatile("" : "+r"(woff[j]));

    unsigned char *const tile = tiles + (t & (tif - 1)) * kTileBytes;
    unsigned char *const trow = tile + g * kStageBytes;
    const unsigned char *const bck = bc + k * 16 * kBcWordBytes;
    // The lane's 8 words of the stage in its visiting order, two at a time: their new state
    // values (two per word for a 2-byte state) into the partial sum and their new words. With
    // stochastic rounding the two words take one Philox call (at the element offset of word
    // j's first column: row d's offset at this stage plus 2 ((j + rot) mod 16)); a pair the
    // fast conversion flags is converted again by the call's rule's exact formula (rare: zero,
    // subnormal, saturated, Inf or NaN results). The 8 words are read first and the new words
    // written back in place (when the warp writes) after the last is computed: no shared load
    // of the tile waits behind a store to it.
    const uint64_t stage_off = sr_head + static_cast<uint64_t>(d) * dstate +
                               static_cast<uint64_t>(k) * E::kStageCols;
    uint32_t w[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) w[j] = *reinterpret_cast<const uint32_t *>(trow + woff[j]);
    // The kernels with a round count and bf16 inputs compiled in, but the grouped copies with 5
    // rounds and the kernels of any stage count (not faster there): the words four at a time,
    // their two Philox calls issued together, so that the two dependent chains of rounds
    // interleave; the same values, sums in the same order and the same calls as the loop below
    // (docs/perf-notes.md, "the horizontal kernel with SR: two Philox calls at a time").
    constexpr bool kPairedPhilox =
        kF16 && kRounds > 0 && kBf16 && !kAnyStages && !(kGrouped && kRounds == 5);
    if constexpr (kPairedPhilox) {
#pragma unroll
      for (int jj = 0; jj < 8; jj += 4) {
        float n[8];
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          const int j = jj + 2 * p;
          const uint32_t s0 = w[j], s1 = w[j + 1];
          const float4 q0 = *reinterpret_cast<const float4 *>(bck + 4 * woff[j]);
          const float4 q1 = *reinterpret_cast<const float4 *>(bck + 4 * woff[j + 1]);
          n[4 * p + 0] = __fmaf_rn(x, q0.x, __fmul_rn(dA, E::lo(s0)));
          n[4 * p + 1] = __fmaf_rn(x, q0.y, __fmul_rn(dA, E::hi(s0)));
          n[4 * p + 2] = __fmaf_rn(x, q1.x, __fmul_rn(dA, E::lo(s1)));
          n[4 * p + 3] = __fmaf_rn(x, q1.y, __fmul_rn(dA, E::hi(s1)));
          acc = __fmaf_rn(q0.z, n[4 * p + 0], acc);
          acc = __fmaf_rn(q0.w, n[4 * p + 1], acc);
          acc = __fmaf_rn(q1.z, n[4 * p + 2], acc);
          acc = __fmaf_rn(q1.w, n[4 * p + 3], acc);
        }
        // A written word is rounded stochastically (a round count compiled in: sr == write).
        if (sr) {  // warp-uniform
          const U32x4 r0 = key.philox(philox_counter(stage_off + woff[jj] / 2), rounds);
          const U32x4 r1 = key.philox(philox_counter(stage_off + woff[jj + 2] / 2), rounds);
          uint32_t f0 = 0, f1 = 0;
          sr_two_words<false>(n, r0, a.sr_rule, w[jj], w[jj + 1], f0);
          sr_two_words<false>(n + 4, r1, a.sr_rule, w[jj + 2], w[jj + 3], f1);
          if (ssu::sr_needs_exact(f0))
            sr_two_words<true>(n, r0, a.sr_rule, w[jj], w[jj + 1], f0);
          if (ssu::sr_needs_exact(f1))
            sr_two_words<true>(n + 4, r1, a.sr_rule, w[jj + 2], w[jj + 3], f1);
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        const uint32_t s0 = w[j], s1 = w[j + 1];
        if constexpr (kTwoByte) {
          const float4 q0 = *reinterpret_cast<const float4 *>(bck + 4 * woff[j]);
          const float4 q1 = *reinterpret_cast<const float4 *>(bck + 4 * woff[j + 1]);
          float n[4];
          n[0] = __fmaf_rn(x, q0.x, __fmul_rn(dA, E::lo(s0)));
          n[1] = __fmaf_rn(x, q0.y, __fmul_rn(dA, E::hi(s0)));
          n[2] = __fmaf_rn(x, q1.x, __fmul_rn(dA, E::lo(s1)));
          n[3] = __fmaf_rn(x, q1.y, __fmul_rn(dA, E::hi(s1)));
          acc = __fmaf_rn(q0.z, n[0], acc);
          acc = __fmaf_rn(q0.w, n[1], acc);
          acc = __fmaf_rn(q1.z, n[2], acc);
          acc = __fmaf_rn(q1.w, n[3], acc);
          if (write) {  // warp-uniform
            if (sr) {
              const U32x4 r = key.philox(philox_counter(stage_off + woff[j] / 2), rounds);
              uint32_t flags = 0;
              sr_two_words<false>(n, r, a.sr_rule, w[j], w[j + 1], flags);
              if (ssu::sr_needs_exact(flags))
                sr_two_words<true>(n, r, a.sr_rule, w[j], w[j + 1], flags);
            } else {
              w[j] = E::pack_rn(n[0], n[1]);
              w[j + 1] = E::pack_rn(n[2], n[3]);
            }
          }
        } else {
          const float2 q0 = *reinterpret_cast<const float2 *>(bck + 2 * woff[j]);
          const float2 q1 = *reinterpret_cast<const float2 *>(bck + 2 * woff[j + 1]);
          const float n0 = __fmaf_rn(x, q0.x, __fmul_rn(dA, __uint_as_float(s0)));
          const float n1 = __fmaf_rn(x, q1.x, __fmul_rn(dA, __uint_as_float(s1)));
          acc = __fmaf_rn(q0.y, n0, acc);
          acc = __fmaf_rn(q1.y, n1, acc);
          w[j] = __float_as_uint(n0);
          w[j + 1] = __float_as_uint(n1);
        }
      }
    }

    if constexpr (kGrouped) {
      if (write) {  // warp-uniform
#pragma unroll
        for (int j = 0; j < 8; ++j) *reinterpret_cast<uint32_t *>(trow + woff[j]) = w[j];
      }
      if ((t & (kGroup - 1)) == kGroup - 1) {  // the group's last tile
        __syncwarp();
        if (write) {  // the group to the write slot, as it was copied in (streaming stores)
          const unsigned char *const base =
              tiles + grp_tile_lane + ((t / kGroup) & 1) * kGroup * kTileBytes;
#pragma unroll
          for (int i = 0; i < 2 * kGroup; ++i) {
            const uint4 v = *reinterpret_cast<const uint4 *>(base + i * 2 * kStageBytes);
            __stcs(reinterpret_cast<uint4 *>(grp_dst + i * grp_step), v);
          }
          grp_dst += grp_advance(t - (kGroup - 1));
        }
        __syncwarp();
        issue_group();
      }
    } else {
      if (write) {  // warp-uniform
#pragma unroll
        for (int j = 0; j < 8; ++j) *reinterpret_cast<uint32_t *>(trow + woff[j]) = w[j];
        __syncwarp();
        // The tile to the write slot: lane l stores chunks l and l + 32 (streaming stores).
        const uint4 v0 = *reinterpret_cast<const uint4 *>(tile + 16 * lane);
        const uint4 v1 = *reinterpret_cast<const uint4 *>(tile + 512 + 16 * lane);
        __stcs(reinterpret_cast<uint4 *>(dst), v0);
        __stcs(reinterpret_cast<uint4 *>(dst + 8 * row_bytes), v1);
        dst += k == nst - 1 ? row_block_step + kStageBytes : kStageBytes;
      }
      __syncwarp();
      issue();
    }

    if (k == nst - 1) {
      // The row's two partial sums: member 0's plus member 1's (FlashInfer's shuffle down 16),
      // D * x, the gate, rounded into out.
      const float other = __shfl_down_sync(kFullMask, acc, 16);
      if (m == 0) {
        float y = __fmaf_rn(D, x, __fadd_rn(acc, other));
        if (has_z) y = ssu::gate(y, zv);
        E::store_out(a, out_row + d, y);
      }
    }
  }
}

// Occupancy floor in blocks per SM: 8 (64 registers) without stochastic rounding; 6 (80
// registers) for the kernels that may round stochastically, whose four Philox calls per tile and
// key schedule do not fit 64 registers without spilling. (At 80 the 5- and 10-round kernels keep
// 8 and 16 bytes of prologue values on the stack, reloaded once per row block, not per tile.)
template <int kState, int kRounds>
constexpr int min_blocks() {
  return kState == MAMBA_SSU_F16 && kRounds != 0 ? 6 : 8;
}

template <int kState, int kRounds, bool kBf16>
__global__ void __launch_bounds__(kThreadsPerBlock, min_blocks<kState, kRounds>())
    hz_kernel(const Args a) {
  hz_body<kState, kRounds, kBf16>(a);
}

// hz_kernel with any stage count (kAnyStages: the uneven dstates), a kernel of its own so that
// hz_kernel's instantiations keep their names and code.
template <int kState, int kRounds, bool kBf16>
__global__ void __launch_bounds__(kThreadsPerBlock, min_blocks<kState, kRounds>())
    hz_kernel_any_stages(const Args a) {
  hz_body<kState, kRounds, kBf16, true>(a);
}

// hz_kernel with its copies by groups of 4 stages (kGrouped), for the calls the launcher gives
// 8 tiles in flight (rows of 4 stages or more; >= 64 MiB of state without stochastic rounding,
// >= 128 MiB with the fp16 state's 5 or 10 rounds compiled in: ssu_single_hz.cu): a kernel of
// its own so that hz_kernel's instantiations keep their names and code.
template <int kState, int kRounds, bool kBf16>
__global__ void __launch_bounds__(kThreadsPerBlock, min_blocks<kState, kRounds>())
    hz_kernel_grouped(const Args a) {
  hz_body<kState, kRounds, kBf16, false, true>(a);
}

// The compile-time parameters of a planned horizontal call's kernel: go(state, rounds,
// compiled) with the state dtype, the round count and whether the input dtypes are compiled in
// as std::integral_constant<int, ...> / std::bool_constant<...> values. `compiled` (bf16 inputs
// and weights, and an fp16 state's 0, 5 or 10 rounds): the instantiation with them (an fp16
// state's round count, 0 otherwise), else the run-time one (-1 rounds with an fp16 state).
// Returns go's result. Every launcher of the horizontal kernels (ssu_single_hz.cu,
// ssu_uneven.cu) picks its instantiation here.
template <int kValue>
using Int = std::integral_constant<int, kValue>;
template <class Go>
int with_kernel_params(int32_t state_dtype, bool compiled, int rounds, Go &&go) {
  using std::false_type;
  using std::true_type;
  switch (state_dtype) {
  case MAMBA_SSU_F16:
    if (!compiled) return go(Int<MAMBA_SSU_F16>{}, Int<-1>{}, false_type{});
    switch (rounds) {
    case 0: return go(Int<MAMBA_SSU_F16>{}, Int<0>{}, true_type{});
    case 5: return go(Int<MAMBA_SSU_F16>{}, Int<5>{}, true_type{});
    default: return go(Int<MAMBA_SSU_F16>{}, Int<10>{}, true_type{});
    }
  case MAMBA_SSU_BF16:
    return compiled ? go(Int<MAMBA_SSU_BF16>{}, Int<0>{}, true_type{})
                    : go(Int<MAMBA_SSU_BF16>{}, Int<0>{}, false_type{});
  default:
    return compiled ? go(Int<MAMBA_SSU_F32>{}, Int<0>{}, true_type{})
                    : go(Int<MAMBA_SSU_F32>{}, Int<0>{}, false_type{});
  }
}

// hz_kernel (kAnyStages: hz_kernel_any_stages; kGrouped: hz_kernel_grouped) with FP16 inputs and
// weights compiled in (kF16In), a kernel of its own so that the others keep their names and code;
// instantiated only in a build with MAMBA_SSU_F16_INPUT_KERNELS (ssu_with_f16_inputs.cu: an F16
// state with 0, 5 or 10 rounds, a BF16 or F32 state; 15 kernels).
template <int kState, int kRounds, bool kAnyStages, bool kGrouped>
__global__ void __launch_bounds__(kThreadsPerBlock, min_blocks<kState, kRounds>())
    hz_kernel_f16in(const Args a) {
  static_assert(!kGrouped || !kAnyStages, "grouped copies: rows of 2, 4 or 8 stages");
  hz_body<kState, kRounds, false, kAnyStages, kGrouped, true>(a);
}

// Launches the horizontal kernel of `state_dtype` with any stage count (hz_kernel_any_stages:
// the uneven dstates) on `nblocks` blocks with `smem` bytes of dynamic shared memory: with
// `compiled` (bf16 inputs and weights, and an fp16 state's 0, 5 or 10 rounds) the instantiation
// with them compiled in, as the other dstates' hz_kernel, else the run-time one; the launch
// status (ssu_uneven.cu, its own translation unit).
int launch_uneven(const Args &a, int32_t state_dtype, bool compiled, unsigned nblocks,
                  size_t smem, cudaStream_t st);

// Launches hz_kernel_f16in for a call with FP16 inputs and weights (an fp16 state's 0, 5 or 10
// rounds, or a bf16 or fp32 state): `any_stages` at an uneven dstate, else `grouped` (8 tiles in
// flight) or not; the launch status (ssu_with_f16_inputs.cu). Defined only in a
// build with MAMBA_SSU_F16_INPUT_KERNELS (launch.h: kF16InputKernels), and called only there.
int launch_f16_inputs(const Args &a, int32_t state_dtype, bool any_stages, bool grouped,
                      unsigned nblocks, size_t smem, cudaStream_t st);

}  // namespace hz
}  // namespace mamba_ssu
