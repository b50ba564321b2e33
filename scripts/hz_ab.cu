// hz_ab.cu — a same-run A/B of the single-token horizontal kernel (csrc/ssu_hz.cuh) against a
// base revision's copy of that header: bit-for-bit comparison of state and out on a set of
// calls (pads, destination slots, z, D, dt_bias, no state update, every state dtype, run-time
// and compiled-in round counts, dstate 64/96/128/256 and the other stage counts, head dims
// 64..256), then CUDA-event timings of both kernels, interleaved, on the calls the benchmarks
// use.
//
//   bash scripts/hz_ab.sh BASE_REV            (here: builds .gpu/hz_ab)
//   .gpu/hz_ab [--check-only] [--time-only] [--reps N] [--ncu] [--only TEXT]   (GPU host; --only:
//   the timing cases whose name contains TEXT; HZ_TIF=4|8 sets both sides' ring of tiles,
//   HZ_NEW_TIF=4|8 the new side's alone (8: hz_kernel_grouped on rows of 4 stages or more, with
//   the compiled-in round counts too); HZ_NEW_RPW=16|32|64 and HZ_NEW_MINW=N the new side's
//   most rows per warp and warps per SM of its rows-per-warp rule; HZ_NEW_RPW_RULE=short16 the
//   new side's cap of 16 rows for rows under 512 bytes or uneven on calls of <= 256 MiB;
//   HZ_WARM=1 times every call on one copy of the state)
//
// Each side plans and dispatches as its revision's launcher: the working tree's rules on the new
// side; on the base's side the rules scripts/hz_ab.sh finds in the base's sources (HZ_BASE_*,
// below), so that an A/B against an unchanged tree compares the same plans and kernels.
//
// Timing: 20 back-to-back calls per sample, each on its own copy of the state (>= 256 MiB
// touched between two uses of a copy: the state comes from HBM), the median of --reps samples
// (base and new alternate sample by sample); bytes = the state read and written. --ncu runs each
// timing call once per side instead (for `ncu --kernel-name regex:hz`).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "checks.h"
#include "ssu_hz.cuh"
#include HZ_BASE_HEADER

using namespace mamba_ssu;

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,                 \
                   cudaGetErrorString(e_));                                          \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

namespace {

struct Case {
  int dim, dstate, nheads, ngroups, batch;
  int state_dtype;  // MAMBA_SSU_F16 / BF16 / F32
  bool bf16_in;     // else fp16 inputs and weights
  int rounds;
  bool z, D, bias, pads, dst, update;
  int sr_rule;
  std::string name() const {
    char b[160];
    std::snprintf(b, sizeof b, "d%d s%d h%dx%d %s%s R%d%s%s%s%s%s%s rule%d", dim, dstate, nheads,
                  batch,
                  state_dtype == MAMBA_SSU_F16 ? "f16" : state_dtype == MAMBA_SSU_BF16 ? "bf16" : "f32",
                  bf16_in ? "" : "/f16in", rounds, z ? " z" : "", D ? " D" : "", bias ? " bias" : "",
                  pads ? " pads" : "", dst ? " dst" : "", update ? "" : " noupdate", sr_rule);
    return b;
  }
  int esize() const { return state_dtype == MAMBA_SSU_F32 ? 4 : 2; }
  // The bytes of a state row, of `slots` slots' state, and of the state the call reads (its
  // batch's slots).
  int row_bytes() const { return dstate * esize(); }
  size_t state_bytes(int64_t slots) const { return size_t(slots) * nheads * dim * row_bytes(); }
  int64_t call_bytes() const { return static_cast<int64_t>(state_bytes(batch)); }
  // Whether the call rounds stochastically (an fp16 state with a round count).
  bool sr() const { return state_dtype == MAMBA_SSU_F16 && rounds > 0; }
  // A dstate the launcher sends to the kernel of any stage count.
  bool uneven() const { return ::mamba_ssu::uneven_dstate(dstate); }
};

uint64_t rng_state = 0x9e3779b97f4a7c15ull;
uint32_t rnd() {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<uint32_t>(rng_state >> 33);
}
float urand(float lo, float hi) { return lo + (hi - lo) * (rnd() & 0xffffff) / 16777216.0f; }
uint16_t f2bf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
uint16_t f2h(float f) {  // round to nearest even, normal range only (the values here)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t s = (u >> 16) & 0x8000, e = (u >> 23) & 0xff;
  if (e < 103) return static_cast<uint16_t>(s);
  uint32_t m = u & 0x7fffff;
  int he = static_cast<int>(e) - 127 + 15;
  if (he <= 0) return static_cast<uint16_t>(s);  // flush (rare here)
  uint32_t hm = m >> 13, rest = m & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (hm & 1))) ++hm;
  if (hm == 0x400) { hm = 0; ++he; }
  return static_cast<uint16_t>(s | (he << 10) | hm);
}

// Device buffers of one case (inputs in the input dtype, 2 bytes, or fp32 A).
struct Bufs {
  void *x, *dt, *bias, *B, *C, *D, *z, *out;
  float *A;
  void *state;  // slots * nheads * dim * dstate
  int32_t *idx, *dst_idx;
  int64_t *seed;
  int64_t slots;
};

void fill2(void *dev, size_t n, bool bf16, float lo, float hi) {
  std::vector<uint16_t> h(n);
  for (auto &v : h) v = bf16 ? f2bf(urand(lo, hi)) : f2h(urand(lo, hi));
  CK(cudaMemcpy(dev, h.data(), 2 * n, cudaMemcpyHostToDevice));
}

void fill_state(void *dev, size_t n, int dtype) {
  if (dtype == MAMBA_SSU_F32) {
    std::vector<float> h(n);
    for (auto &v : h) v = urand(-2.f, 2.f);
    CK(cudaMemcpy(dev, h.data(), 4 * n, cudaMemcpyHostToDevice));
  } else {
    fill2(dev, n, dtype == MAMBA_SSU_BF16, -2.f, 2.f);
  }
}

Bufs alloc(const Case &c, int64_t slots) {
  Bufs b{};
  const size_t nx = size_t(c.batch) * c.nheads * c.dim, nbc = size_t(c.batch) * c.ngroups * c.dstate;
  CK(cudaMalloc(&b.x, 2 * nx));
  CK(cudaMalloc(&b.z, 2 * nx));
  CK(cudaMalloc(&b.out, 2 * nx));
  CK(cudaMalloc(&b.dt, 2 * size_t(c.batch) * c.nheads));
  CK(cudaMalloc(&b.bias, 2 * size_t(c.nheads)));
  CK(cudaMalloc(&b.D, 2 * size_t(c.nheads)));
  CK(cudaMalloc(&b.A, 4 * size_t(c.nheads)));
  CK(cudaMalloc(&b.B, 2 * nbc));
  CK(cudaMalloc(&b.C, 2 * nbc));
  CK(cudaMalloc(&b.seed, 8));
  b.slots = slots;
  CK(cudaMalloc(&b.state, c.state_bytes(slots)));
  CK(cudaMalloc(&b.idx, 4 * size_t(slots)));
  CK(cudaMalloc(&b.dst_idx, 4 * size_t(slots)));
  fill2(b.x, nx, c.bf16_in, -1.f, 1.f);
  fill2(b.z, nx, c.bf16_in, -2.f, 2.f);
  fill2(b.dt, size_t(c.batch) * c.nheads, c.bf16_in, -3.f, 1.f);
  fill2(b.bias, c.nheads, c.bf16_in, -1.f, 1.f);
  fill2(b.D, c.nheads, c.bf16_in, -1.f, 1.f);
  fill2(b.B, nbc, c.bf16_in, -1.f, 1.f);
  fill2(b.C, nbc, c.bf16_in, -1.f, 1.f);
  std::vector<float> A(c.nheads);
  for (auto &v : A) v = -urand(0.1f, 4.f);
  CK(cudaMemcpy(b.A, A.data(), 4 * A.size(), cudaMemcpyHostToDevice));
  const int64_t seed = 0x1234567890abcdefll ^ rnd();
  CK(cudaMemcpy(b.seed, &seed, 8, cudaMemcpyHostToDevice));
  return b;
}

void release(Bufs &b) {
  for (void *p : {b.x, b.z, b.out, b.dt, b.bias, b.D, static_cast<void *>(b.A), b.B, b.C,
                  static_cast<void *>(b.seed), b.state, static_cast<void *>(b.idx),
                  static_cast<void *>(b.dst_idx)})
    CK(cudaFree(p));
}

// The launch plan of ssu_single_hz.cu (rows per warp halved while the grid has fewer than 32
// warps per SM, down to 16).
template <class A>
void fill_args(A &a, const Case &c, const Bufs &b, const int32_t *idx, const int32_t *dst,
               int rpw) {
  a.x = b.x;
  a.dt = b.dt;
  a.dt_bias = c.bias ? b.bias : nullptr;
  a.A = b.A;
  a.B = b.B;
  a.C = b.C;
  a.D = c.D ? b.D : nullptr;
  a.z = c.z ? b.z : nullptr;
  a.out = b.out;
  a.state = b.state;
  a.state_batch_indices = idx;
  a.dst_state_batch_indices = c.dst ? dst : nullptr;
  a.rand_seed = b.seed;
  a.seed_source = MAMBA_SSU_SEED_POINTER;
  a.philox_rounds = c.state_dtype == MAMBA_SSU_F16 ? c.rounds : 0;
  a.sr_rule = c.sr_rule;
  a.state_stride_batch = int64_t(c.nheads) * c.dim * c.dstate;
  a.x_stride_batch = int64_t(c.nheads) * c.dim;
  a.dt_stride_batch = c.nheads;
  a.B_stride_batch = int64_t(c.ngroups) * c.dstate;
  a.C_stride_batch = int64_t(c.ngroups) * c.dstate;
  a.z_stride_batch = int64_t(c.nheads) * c.dim;
  a.out_stride_batch = int64_t(c.nheads) * c.dim;
  a.state_batch_indices_stride = 1;
  a.dst_state_batch_indices_stride = 1;
  a.pad_slot_id = -1;
  a.state_cache_size = b.slots;
  a.nheads = c.nheads;
  a.heads_per_group = c.nheads / c.ngroups;
  a.rows_per_warp = rpw;
  a.warps_per_head = c.dim / rpw;
  a.total_warps = int64_t(c.batch) * c.nheads * (c.dim / rpw);
  a.dim = c.dim;
  a.dstate = c.dstate;
  a.input_dtype = c.bf16_in ? MAMBA_SSU_BF16 : MAMBA_SSU_F16;
  a.weight_dtype = a.input_dtype;
  a.index_dtype = MAMBA_SSU_I32;
  a.dt_softplus = 1;
  a.update_state = c.update ? 1 : 0;
}

int plan_rpw(const Case &c, int max_rpw, int min_warps_per_sm, int num_sms) {
  const int64_t heads = int64_t(c.batch) * c.nheads;
  int rpw = max_rpw;
  while (rpw > 16 && ((c.dim / 16) % (rpw / 16) != 0 ||
                      heads * (c.dim / rpw) < int64_t(min_warps_per_sm) * num_sms))
    rpw /= 2;
  return rpw;
}

int g_num_sms = 132;

// Whether a call with `tiles` in flight runs hz_kernel_grouped (the launchers' dispatch: 8 tiles,
// rows of 4 stages or more; HZ_TIF=8 forces 8 tiles on shorter rows too, which take hz_kernel).
bool takes_grouped(int tiles, const Case &c) { return tiles == 8 && c.row_bytes() >= 256; }

// The base revision's launcher rules, as scripts/hz_ab.sh finds them in its sources: grouped
// copies for the calls with 8 tiles (its header has hz_kernel_grouped), the SR calls' 8 tiles
// from 128 MiB (kLargeSrCallStateBytes), the 512-byte-row rule (kWideRowStages), the kernels of
// any stage count with the dtypes and round counts compiled in (hz::launch_uneven's `compiled`).
#ifndef HZ_BASE_GROUPED
#define HZ_BASE_GROUPED 0
#endif
#ifndef HZ_BASE_SR_GROUPED
#define HZ_BASE_SR_GROUPED 0
#endif
#ifndef HZ_BASE_WIDE_ROWS
#define HZ_BASE_WIDE_ROWS 0
#endif
#ifndef HZ_BASE_ANY_COMPILED
#define HZ_BASE_ANY_COMPILED 0
#endif
constexpr bool kBaseSrGrouped = HZ_BASE_SR_GROUPED != 0;
constexpr bool kBaseWideRows = HZ_BASE_WIDE_ROWS != 0;

// The launcher's calls without stochastic rounding, bf16 inputs (the kernels compiled in here),
// in rows of 512 bytes under 64 MiB (ssu_single_hz.cu: kWideRowStages; not uneven): up to 32
// rows per warp by 8 warps per SM and 8 tiles in flight (the new side, and a base with the rule).
bool wide_small(const Case &c) {
  const int64_t bytes = c.call_bytes();
  const bool rounds = c.sr();
  return c.bf16_in && !rounds && !c.uneven() && c.row_bytes() == 512 &&
         bytes < (int64_t(64) << 20);
}

// The launcher's rows per warp (ssu_single_hz.cu: at most 64, halved while the grid has fewer
// than 32 warps per SM; wide_small's calls at most 32 by 8 warps per SM); on the new side
// HZ_NEW_RPW (the most rows per warp: 16, 32 or 64) and HZ_NEW_MINW (the warps per SM) override
// those two constants, for experiments on the rule.
template <class A>
int plan_rpw_side(const Case &c) {
  constexpr bool new_side = std::is_same_v<A, ::mamba_ssu::hz::Args>;
  int max_rpw = 64, min_warps = 32;
  if ((new_side || kBaseWideRows) && wide_small(c)) max_rpw = 32, min_warps = 8;
  if constexpr (new_side) {
    if (const char *e = std::getenv("HZ_NEW_RPW")) max_rpw = std::atoi(e);
    if (const char *e = std::getenv("HZ_NEW_MINW")) min_warps = std::atoi(e);
    // HZ_NEW_RPW_RULE=short16: at most 16 rows a warp where a row is shorter than 512 bytes or
    // the dstate is uneven, on calls that read at most 256 MiB of state (the calls where the
    // 16-row cap measured faster in docs/perf-notes.md, "2026-12-07: the horizontal kernel with
    // SR: what did not help after the paired calls"; the 512-byte rows and the 1 GiB call
    // measured slower).
    if (const char *e = std::getenv("HZ_NEW_RPW_RULE"); e && std::strcmp(e, "short16") == 0) {
      if ((c.row_bytes() < 512 || c.uneven()) && c.call_bytes() <= (int64_t(256) << 20))
        max_rpw = std::min(max_rpw, 16);
    }
  }
  return plan_rpw(c, max_rpw, min_warps, g_num_sms);
}

// Whether a side's Args carries tiles_in_flight (the per-call ring of ssu_single_hz.cu).
template <class A>
struct HasTif {
  template <class T>
  static auto t(int) -> decltype(std::declval<T &>().tiles_in_flight, std::true_type{});
  template <class>
  static std::false_type t(long);
  static constexpr bool value = decltype(t<A>(0))::value;
};

// The block's shared memory of a side (and its tiles in flight where its Args has them).
int plan_tif(const Case &c, bool new_side);
template <class A, class S2, class S1, class SetT>
size_t smem_for(A &a, const Case &c, S2 s2, S1 s1, SetT set) {
  if constexpr (HasTif<A>::value) {
    int t = plan_tif(c, std::is_same_v<A, ::mamba_ssu::hz::Args>);
    // HZ_NEW_TIF: the new side's ring alone (4 or 8), for experiments on the launcher's rule.
    if (const char *e = std::getenv("HZ_NEW_TIF"); e && std::is_same_v<A, ::mamba_ssu::hz::Args>)
      t = std::atoi(e);
    set(a, t);
    return s2(c.dstate, t);
  } else {
    return s1(c.dstate);
  }
}

// The launcher's choice (ssu_single_hz.cu): 8 tiles in flight for calls that read >= 64 MiB of
// state in rows of >= 256 bytes without stochastic rounding (and the smaller ones in rows of
// 512 bytes: wide_small), else 4; with stochastic rounding 8 from 128 MiB where the round count
// is compiled in (5 or 10, bf16 inputs) at a dstate of 4 or 8 stages (not uneven), else 4. The new
// side follows the working tree's launcher; the base's side its revision's (the HZ_BASE_* rules
// above; a base without them keeps 4 tiles with stochastic rounding, as the launchers up to
// b082efa). HZ_TIF overrides both sides (4 or 8) for experiments.
int plan_tif(const Case &c, bool new_side) {
  if (const char *e = std::getenv("HZ_TIF")) return std::atoi(e);
  const int64_t bytes = c.call_bytes();
  const bool rounds = c.sr();
  const bool long_rows = c.row_bytes() >= 256;
  if (!rounds)
    return long_rows && (bytes >= (int64_t(64) << 20) ||
                         ((new_side || kBaseWideRows) && wide_small(c)))
               ? 8
               : 4;
  const bool sr_grouped = (new_side || kBaseSrGrouped) && c.bf16_in &&
                          (c.rounds == 5 || c.rounds == 10) && !c.uneven();
  return sr_grouped && long_rows && bytes >= (int64_t(128) << 20) ? 8 : 4;
}

__global__ void spin(int *flag, long long ns) {
  const long long t0 = clock64();
  while (clock64() - t0 < ns * 2) {  // ~2 cycles per ns at the H200's clocks
  }
  *flag = 1;
}

// One call of side NS's kernel (the dispatch of ssu_single_hz.cu).
#define HZ_SIDE(NS, FN, GO, ANY)                                                               \
  void FN(const Case &c, const Bufs &b, const int32_t *idx, const int32_t *dst,                \
          cudaStream_t st) {                                                                   \
    using namespace NS;                                                                        \
    Args a{};                                                                                  \
    const int rpw = plan_rpw_side<Args>(c);                                                    \
    fill_args(a, c, b, idx, dst, rpw);                                                         \
    const unsigned nblocks =                                                                   \
        static_cast<unsigned>((a.total_warps + kWarpsPerBlock - 1) / kWarpsPerBlock);          \
    const size_t smem = smem_for(                                                              \
        a, c, [](auto ds, auto t) { return block_smem_bytes(ds, t); },                         \
        [](auto ds) { return block_smem_bytes(ds); },                                          \
        [](auto &args, int t) { args.tiles_in_flight = t; });                                  \
    const bool bf = c.bf16_in;                                                                 \
    auto go = [&](auto kern) {                                                                 \
      kern<<<nblocks, kThreadsPerBlock, smem, st>>>(a);                                        \
      CK(cudaGetLastError());                                                                  \
    };                                                                                         \
    if (c.uneven()) {                                                                          \
      ANY(bf && (c.rounds == 0 || c.rounds == 5 || c.rounds == 10));                           \
      return;                                                                                  \
    }                                                                                          \
    if (c.state_dtype == MAMBA_SSU_F16) {                                                      \
      if (bf && (c.rounds == 0 || c.rounds == 5 || c.rounds == 10)) {                          \
        if (c.rounds == 0) GO(MAMBA_SSU_F16, 0, true);                                         \
        else if (c.rounds == 5) GO(MAMBA_SSU_F16, 5, true);                                    \
        else GO(MAMBA_SSU_F16, 10, true);                                                      \
      } else {                                                                                 \
        go(hz_kernel<MAMBA_SSU_F16, -1, false>);                                               \
      }                                                                                        \
    } else if (c.state_dtype == MAMBA_SSU_BF16) {                                              \
      if (bf) GO(MAMBA_SSU_BF16, 0, true);                                                     \
      else GO(MAMBA_SSU_BF16, 0, false);                                                       \
    } else {                                                                                   \
      if (bf) GO(MAMBA_SSU_F32, 0, true);                                                      \
      else GO(MAMBA_SSU_F32, 0, false);                                                        \
    }                                                                                          \
  }

// A kernel with the round count R (0, 5 or 10) compiled in: on the new side, as its launcher
// does, hz_kernel_grouped for the calls with 8 tiles in flight (HZ_GO_NEW, below); on the base's
// side likewise where its header has that kernel (HZ_BASE_GROUPED), else hz_kernel.
#if HZ_BASE_GROUPED
// (A template, so that the grouped kernel of a round count the base's launcher never grouped is
// not instantiated: before 466a9a9 it took no rounding.)
template <int S, int R, bool BF, class Go>
void go_base(Go &go, const ::mamba_ssu::hz_base::Args &a, const Case &c) {
  using namespace ::mamba_ssu::hz_base;
  if constexpr (R == 0 || kBaseSrGrouped) {
    if (takes_grouped(a.tiles_in_flight, c)) {
      go(hz_kernel_grouped<S, R, BF>);
      return;
    }
  }
  go(hz_kernel<S, R, BF>);
}
#define HZ_GO_BASE(S, R, BF) go_base<S, R, BF>(go, a, c)
#else
#define HZ_GO_BASE(S, R, BF) go(hz_kernel<S, R, BF>)
#endif
// The kernel of any stage count (uneven dstates): a base's launcher without HZ_BASE_ANY_COMPILED
// runs its run-time instantiations; the new side, as its launcher does (and such a base), the
// ones with the input dtypes and the round count compiled in where the call allows (`cr`).
#if HZ_BASE_ANY_COMPILED
#define HZ_ANY_BASE(cr) HZ_ANY_NEW(cr)
#else
#define HZ_ANY_BASE(cr)                                                                        \
  do {                                                                                         \
    (void)(cr);                                                                                \
    if (c.state_dtype == MAMBA_SSU_F16) go(hz_kernel_any_stages<MAMBA_SSU_F16, -1, false>);   \
    else if (c.state_dtype == MAMBA_SSU_BF16)                                                  \
      go(hz_kernel_any_stages<MAMBA_SSU_BF16, 0, false>);                                      \
    else go(hz_kernel_any_stages<MAMBA_SSU_F32, 0, false>);                                    \
  } while (0)
#endif
#define HZ_ANY_NEW(cr)                                                                         \
  do {                                                                                         \
    if (c.state_dtype == MAMBA_SSU_F16) {                                                      \
      if (!(cr)) go(hz_kernel_any_stages<MAMBA_SSU_F16, -1, false>);                           \
      else if (c.rounds == 0) go(hz_kernel_any_stages<MAMBA_SSU_F16, 0, true>);                \
      else if (c.rounds == 5) go(hz_kernel_any_stages<MAMBA_SSU_F16, 5, true>);                \
      else go(hz_kernel_any_stages<MAMBA_SSU_F16, 10, true>);                                  \
    } else if (c.state_dtype == MAMBA_SSU_BF16) {                                              \
      if (bf) go(hz_kernel_any_stages<MAMBA_SSU_BF16, 0, true>);                               \
      else go(hz_kernel_any_stages<MAMBA_SSU_BF16, 0, false>);                                 \
    } else {                                                                                   \
      if (bf) go(hz_kernel_any_stages<MAMBA_SSU_F32, 0, true>);                                \
      else go(hz_kernel_any_stages<MAMBA_SSU_F32, 0, false>);                                  \
    }                                                                                          \
  } while (0)
// (takes_grouped; HZ_NEW_TIF=8 gives the rounding calls 8 tiles.)
#define HZ_GO_NEW(S, R, BF)                                                          \
  (takes_grouped(a.tiles_in_flight, c) ? go(hz_kernel_grouped<S, R, BF>)             \
                                       : go(hz_kernel<S, R, BF>))
HZ_SIDE(::mamba_ssu::hz_base, launch_base, HZ_GO_BASE, HZ_ANY_BASE)
HZ_SIDE(::mamba_ssu::hz, launch_new, HZ_GO_NEW, HZ_ANY_NEW)

// Index arrays: copy k of the batch reads slots k * batch + b (pads: every 5th entry -1); dst:
// the same slot in the cache's second half (no call writes a slot another entry reads).
void set_indices(const Case &c, Bufs &b, int copies) {
  std::vector<int32_t> idx(size_t(copies) * c.batch), dst(idx.size());
  for (int k = 0; k < copies; ++k)
    for (int i = 0; i < c.batch; ++i) {
      const int64_t s = int64_t(k) * c.batch + i;
      idx[s] = (c.pads && i % 5 == 3) ? -1 : static_cast<int32_t>(s);
      dst[s] = (c.pads && i % 7 == 2) ? -1 : static_cast<int32_t>(s + b.slots / 2);
    }
  CK(cudaMemcpy(b.idx, idx.data(), 4 * idx.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.dst_idx, dst.data(), 4 * dst.size(), cudaMemcpyHostToDevice));
}

bool check(const Case &c) {
  const int copies = 1;
  const int64_t slots = 2 * int64_t(c.batch) * copies;
  Bufs b = alloc(c, slots);
  set_indices(c, b, copies);
  const size_t sb = c.state_bytes(slots), ob = 2 * size_t(c.batch) * c.nheads * c.dim;
  void *init;
  CK(cudaMalloc(&init, sb));
  fill_state(init, sb / c.esize(), c.state_dtype);
  std::vector<unsigned char> s0(sb), s1(sb), o0(ob), o1(ob);
  bool ok = true;
  // Two calls in a row per side (the second reads the first's writes).
  for (int side = 0; side < 2; ++side) {
    CK(cudaMemcpy(b.state, init, sb, cudaMemcpyDeviceToDevice));
    CK(cudaMemset(b.out, 0xab, ob));
    for (int call = 0; call < 2; ++call) {
      if (side == 0) launch_base(c, b, b.idx, b.dst_idx, 0);
      else launch_new(c, b, b.idx, b.dst_idx, 0);
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(side ? s1.data() : s0.data(), b.state, sb, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(side ? o1.data() : o0.data(), b.out, ob, cudaMemcpyDeviceToHost));
  }
  size_t ds = 0, dout = 0;
  for (size_t i = 0; i < sb; ++i) ds += s0[i] != s1[i];
  for (size_t i = 0; i < ob; ++i) dout += o0[i] != o1[i];
  ok = ds == 0 && dout == 0;
  std::printf("check %-60s %s", c.name().c_str(), ok ? "identical" : "DIFFER");
  if (!ok) std::printf(" (state bytes %zu, out bytes %zu)", ds, dout);
  std::printf("\n");
  CK(cudaFree(init));
  release(b);
  return ok;
}

void time_case(const Case &c, int reps, bool ncu) {
  const size_t one = c.state_bytes(c.batch);
  const int calls = 20;
  int copies = static_cast<int>(std::max<size_t>(calls, (size_t(256) << 20) / one + 1));
  // HZ_WARM=1: every call on the same copy (the state warm in L2 where it fits, as
  // python/bench/flashinfer_warm.py times FlashInfer's kernel).
  if (ncu || std::getenv("HZ_WARM")) copies = 1;
  const int64_t slots = int64_t(c.batch) * copies;
  Bufs b = alloc(c, slots);
  set_indices(c, b, copies);
  CK(cudaMemset(b.state, 0, c.state_bytes(slots)));
  fill_state(b.state, c.state_bytes(std::min<int64_t>(slots, c.batch)) / c.esize(), c.state_dtype);
  if (ncu) {
    launch_base(c, b, b.idx, b.dst_idx, 0);
    launch_new(c, b, b.idx, b.dst_idx, 0);
    CK(cudaDeviceSynchronize());
    std::printf("ncu %s\n", c.name().c_str());
    release(b);
    return;
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t[2];
  int k = 0;
  int *flag;
  CK(cudaMalloc(&flag, 4));
  for (int r = 0; r < reps + 1; ++r)
    for (int side = 0; side < 2; ++side) {
      const int s = (r & 1) ? 1 - side : side;
      // The calls queue behind a 2 ms spin, so that the host's launch cost drops out.
      spin<<<1, 1>>>(flag, 2000000);
      CK(cudaEventRecord(e0, 0));
      for (int i = 0; i < calls; ++i, k = (k + 1) % copies) {
        const int32_t *ix = b.idx + int64_t(k) * c.batch;
        const int32_t *dx = b.dst_idx + int64_t(k) * c.batch;
        if (s == 0) launch_base(c, b, ix, dx, 0);
        else launch_new(c, b, ix, dx, 0);
      }
      CK(cudaEventRecord(e1, 0));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r > 0) t[s].push_back(ms * 1000.f / calls);  // sample 0: warm-up
    }
  for (auto &v : t) std::sort(v.begin(), v.end());
  const float tb = t[0][t[0].size() / 2], tn = t[1][t[1].size() / 2];
  const double bytes = 2.0 * c.state_bytes(c.batch);
  std::printf("time %-52s base %8.2f us  new %8.2f us  base/new %.3f  new %6.0f GB/s\n",
              c.name().c_str(), tb, tn, tb / tn, bytes / (tn * 1e3));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaFree(flag));
  release(b);
}

Case mk(int dim, int dstate, int heads, int batch, int sd, int rounds) {
  Case c{};
  c.dim = dim;
  c.dstate = dstate;
  c.nheads = heads;
  c.ngroups = 8;
  c.batch = batch;
  c.state_dtype = sd;
  c.bf16_in = true;
  c.rounds = rounds;
  c.D = true;
  c.bias = true;
  c.update = true;
  return c;
}

}  // namespace

int main(int argc, char **argv) {
  bool check_only = false, time_only = false, ncu = false;
  std::string only;
  int reps = 9;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--check-only") check_only = true;
    else if (a == "--time-only") time_only = true;
    else if (a == "--ncu") ncu = true;
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: hz_ab [--check-only] [--time-only] [--reps N] [--ncu] [--only TEXT]\n");
      return 2;
    }
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_num_sms = prop.multiProcessorCount;
  std::printf("device %s, %d SMs\n", prop.name, g_num_sms);
  int failures = 0;
  if (!time_only && !ncu) {
    const int F16 = MAMBA_SSU_F16, BF = MAMBA_SSU_BF16, F32 = MAMBA_SSU_F32;
    std::vector<Case> cs;
    for (int sd : {F16, BF, F32})
      for (int dim : {64, 128, 192, 256})
        for (int ds : {64, 96, 128, 256})
          for (int rounds : {0, 5, 10, 3}) {
            if (sd != F16 && rounds != 0) continue;
            if (rounds == 3 && dim != 128) continue;
            Case c = mk(dim, ds, dim == 256 ? 24 : 32, dim >= 192 ? 3 : 5, sd, rounds);
            c.pads = true;
            c.dst = (dim + ds) % 128 == 0;
            c.z = dim != 192;
            c.sr_rule = (ds / 32) & 1;
            cs.push_back(c);
          }
    // The forms the dispatch sends elsewhere: fp16 inputs, no D / bias, no update, big grids.
    Case c = mk(128, 128, 32, 4, F16, 5);
    c.bf16_in = false;
    c.z = true;
    cs.push_back(c);
    c = mk(64, 128, 16, 2, F16, 10);
    c.D = c.bias = false;
    cs.push_back(c);
    c = mk(128, 256, 32, 3, F16, 10);
    c.update = false;
    cs.push_back(c);
    c = mk(64, 128, 128, 64, F16, 10);  // 64 rows per warp
    c.pads = c.dst = true;
    cs.push_back(c);
    c = mk(128, 128, 128, 64, F32, 0);
    c.pads = true;
    cs.push_back(c);
    c = mk(128, 64, 128, 64, BF, 0);
    cs.push_back(c);
    // The other uneven dstates (the kernel of any stage count), 2-byte rows of 5, 7 and 9 stages.
    for (int ds : {160, 224, 288})
      for (int rounds : {0, 5, 10}) {
        c = mk(64, ds, 32, 5, F16, rounds);
        c.pads = true;
        c.sr_rule = (ds / 32) & 1;
        cs.push_back(c);
      }
    for (const Case &k : cs) failures += !check(k);
    std::printf("check: %zu cases, %d differ\n", cs.size(), failures);
  }
  if (!check_only) {
    const int F16 = MAMBA_SSU_F16, BF = MAMBA_SSU_BF16, F32 = MAMBA_SSU_F32;
    std::vector<Case> ts;
    for (int dim : {64, 128})
      for (int batch : {8, 32})
        for (int rounds : {0, 5, 10}) ts.push_back(mk(dim, 128, 128, batch, F16, rounds));
    for (int sd : {BF, F32})
      for (int dim : {64, 128})
        for (int ds : {64, 256})
          for (int batch : {8, 32}) ts.push_back(mk(dim, ds, 128, batch, sd, 0));
    // fp16 state, dstate 256 (rows of 512 bytes).
    for (int dim : {64, 128})
      for (int batch : {8, 32})
        for (int rounds : {0, 5, 10}) ts.push_back(mk(dim, 256, 128, batch, F16, rounds));
    // fp32 state, rows of 512 bytes (dstate 128) at batch 8.
    for (int dim : {64, 128}) ts.push_back(mk(dim, 128, 128, 8, F32, 0));
    ts.push_back(mk(128, 128, 128, 256, F16, 0));
    ts.push_back(mk(128, 128, 128, 256, F16, 10));
    // dstate 96 (the kernel of any stage count).
    for (int batch : {8, 32})
      for (int rounds : {0, 5}) ts.push_back(mk(64, 96, 128, batch, F16, rounds));
    for (int sd : {BF, F32}) ts.push_back(mk(64, 96, 128, 32, sd, 0));
    // The other uneven dstates with stochastic rounding (the kernel of any stage count).
    for (int ds : {192, 288})
      for (int batch : {8, 32})
        for (int rounds : {5, 10}) ts.push_back(mk(64, ds, 128, batch, F16, rounds));
    for (const Case &k : ts)
      if (only.empty() || k.name().find(only) != std::string::npos) time_case(k, reps, ncu);
  }
  return failures ? 1 : 0;
}
