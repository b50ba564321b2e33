// mtp_write_roofline.cu — what the multi-token SSU's memory traffic can reach on the GPU at
// hand, without its arithmetic: the geometry of mtp_bench's largest dense case (batch 64,
// 128 heads, dim 64, dstate 128, T = 8, fp16 state: 128 MiB read once, 1 GiB written to the
// intermediate buffer (entries, T, heads, dim, dstate)), moved by copy kernels with the
// kernel's block layout (one block of 128 threads per (sequence, head), 8 lanes per 256-byte
// state row, lane m's 16-byte words at columns 8m and 64 + 8m) in several store orders, next
// to a 1 GiB memset and a linear 16-byte write kernel timed in the same run. Used to tell how
// much of the gap to the memset is the access pattern (docs/perf-notes.md).
//
// Build and run (needs nvcc; the CUDA runtime is linked statically):
//   nvcc -O3 -arch=sm_90 -std=c++17 scripts/mtp_write_roofline.cu -o mtp_write_roofline \
//        -L$CUDA/lib -lcudart_static -ldl -lpthread -lrt
//   ./mtp_write_roofline
// Each line: the median of 15 timed runs (CUDA events, 3 warm-up runs), µs, the write rate
// (1 GiB / time) and that rate as a percentage of the memset's.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

namespace {

constexpr int kBatch = 64, kHeads = 128, kDim = 64, kDstate = 128, kT = 8;
constexpr size_t kHeadElems = size_t{kDim} * kDstate;                  // 8192 fp16 = 16 KiB
constexpr size_t kStateBytes = size_t{kBatch} * kHeads * kHeadElems * 2;  // 128 MiB
constexpr size_t kInterBytes = kStateBytes * kT;                          // 1 GiB

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

template <bool kCs>
__device__ __forceinline__ void st16(void *p, uint4 v) {
  if constexpr (kCs) {
    asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
  } else {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
  }
}

__device__ __forceinline__ uint4 bump(uint4 v, uint32_t t) {
  return uint4{v.x + t, v.y ^ t, v.z + 3 * t, v.w ^ (t << 7)};
}

// Byte offset of lane m's 16-byte word j (columns 64 j + 8 m ..) in row d of a head's state.
__device__ __forceinline__ size_t word_off(int d, int j, int m) {
  return (size_t(d) * kDstate + 64 * j + 8 * m) * 2;
}

// Token t's values of a group's 4 rows into the token's tile (streaming 16-byte stores).
__device__ __forceinline__ void store_rows4(char *tile, int grp, int m, const uint4 (&v)[4][2],
                                            int t) {
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int j = 0; j < 2; ++j) st16<true>(tile + word_off(grp + 16 * r, j, m), bump(v[r][j], t));
}

// A group's 4 rows (grp + 16 r) of the head at src, 2 words each: streaming loads (kCs),
// plain loads, or (!kRead) values made from the thread instead.
template <bool kRead, bool kCs>
__device__ __forceinline__ void load_rows4(const char *src, int grp, int m, int bh,
                                           uint4 (&v)[4][2]) {
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int d = grp + 16 * r;
      const uint4 *p = reinterpret_cast<const uint4 *>(src + word_off(d, j, m));
      v[r][j] = !kRead ? uint4{uint32_t(d), uint32_t(j), threadIdx.x, uint32_t(bh)}
                : kCs  ? __ldcs(p)
                       : *p;
    }
}

// kOrder 0: row outer (a group's rows d, d + 16, d + 32, d + 48 one after the other, each
// row's T tokens before the next row: the one-row kernels' order); 2: two rows at a time
// (rows d and d + 16 per token, then d + 32 and d + 48: the two-row kernels' order); 1: token
// outer (all 4 rows of the group per token: the block writes token t's 16 KiB tile before
// token t + 1's). kRead: the state is read (else the stored values come from the thread id).
template <int kOrder, bool kCs, bool kRead, int kMinBlocks>
__global__ void __launch_bounds__(128, kMinBlocks)
    fanout(const uint4 *__restrict__ state, char *__restrict__ inter) {
  const int bh = blockIdx.x;
  const int b = bh / kHeads, h = bh % kHeads;
  const int grp = threadIdx.x / 8, m = threadIdx.x % 8;
  const char *src = reinterpret_cast<const char *>(state) + size_t(bh) * kHeadElems * 2;
  auto dst = [&](int t, int d, int j) {
    return inter + ((size_t(b) * kT + t) * kHeads + h) * kHeadElems * 2 +
           word_off(d, j, m);
  };
  auto load = [&](int d, int j) -> uint4 {
    if constexpr (kRead) {
      return __ldcs(reinterpret_cast<const uint4 *>(src + word_off(d, j, m)));
    } else {
      return uint4{uint32_t(d), uint32_t(j), threadIdx.x, uint32_t(bh)};
    }
  };
  if constexpr (kOrder == 1) {
    uint4 v[4][2];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int j = 0; j < 2; ++j) v[r][j] = load(grp + 16 * r, j);
    for (int t = 0; t < kT; ++t)
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int j = 0; j < 2; ++j) st16<kCs>(dst(t, grp + 16 * r, j), bump(v[r][j], t));
  } else {
    constexpr int R = kOrder == 2 ? 2 : 1;
    for (int d0 = grp; d0 < kDim; d0 += 16 * R) {
      uint4 v[R][2];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < 2; ++j) v[r][j] = load(d0 + 16 * r, j);
      for (int t = 0; t < kT; ++t)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int j = 0; j < 2; ++j) st16<kCs>(dst(t, d0 + 16 * r, j), bump(v[r][j], t));
    }
  }
}

// Token outer with kHpb consecutive heads of one sequence per block (128 threads each) and a
// block barrier after every token, so that the block writes token t's kHpb tiles (kHpb x 16 KiB,
// contiguous in the buffer) before token t + 1's.
// kL2: every block reads one of 64 heads' states (1 MiB, resident in L2) instead of its own.
template <int kHpb, bool kRead, bool kL2 = false>
__global__ void __launch_bounds__(128 * kHpb)
    fanout_sync(const uint4 *__restrict__ state, char *__restrict__ inter) {
  const int bh = blockIdx.x * kHpb + threadIdx.x / 128;
  const int b = bh / kHeads, h = bh % kHeads;
  const int lt = threadIdx.x % 128;
  const int grp = lt / 8, m = lt % 8;
  const char *src =
      reinterpret_cast<const char *>(state) + size_t(kL2 ? bh % 64 : bh) * kHeadElems * 2;
  uint4 v[4][2];
  load_rows4<kRead, false>(src, grp, m, bh, v);
  for (int t = 0; t < kT; ++t) {
    store_rows4(inter + ((size_t(b) * kT + t) * kHeads + h) * kHeadElems * 2, grp, m, v, t);
    __syncthreads();
  }
}

// Persistent token-outer blocks: item i = (sequence, head) for i = blockIdx.x, + gridDim.x, ...;
// the next item's state is loaded before the current item's tokens are written. (Its loops are
// spelled out: through load_rows4/store_rows4 its SASS differs from the build that was measured.)
__global__ void __launch_bounds__(128)
    fanout_persistent(const uint4 *__restrict__ state, char *__restrict__ inter) {
  const int grp = threadIdx.x / 8, m = threadIdx.x % 8;
  auto load = [&](int bh, uint4 (&v)[4][2]) {
    const char *src = reinterpret_cast<const char *>(state) + size_t(bh) * kHeadElems * 2;
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        v[r][j] = __ldcs(reinterpret_cast<const uint4 *>(
            src + word_off(grp + 16 * r, j, m)));
  };
  int bh = blockIdx.x;
  uint4 nxt[4][2];
  if (bh < kBatch * kHeads) load(bh, nxt);
  for (; bh < kBatch * kHeads; bh += gridDim.x) {
    uint4 v[4][2];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int j = 0; j < 2; ++j) v[r][j] = nxt[r][j];
    if (bh + int(gridDim.x) < kBatch * kHeads) load(bh + gridDim.x, nxt);
    const int b = bh / kHeads, h = bh % kHeads;
    for (int t = 0; t < kT; ++t) {
      char *tile = inter + ((size_t(b) * kT + t) * kHeads + h) * kHeadElems * 2;
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int j = 0; j < 2; ++j)
          st16<true>(tile + word_off(grp + 16 * r, j, m),
                     bump(v[r][j], t));
    }
  }
}

// Token outer through the TMA: each token's 16 KiB tile is assembled in shared memory (two
// buffers) and written by one bulk copy (cp.async.bulk shared -> global) issued by thread 0.
template <bool kRead>
__global__ void __launch_bounds__(128)
    fanout_bulk(const uint4 *__restrict__ state, char *__restrict__ inter) {
  extern __shared__ __align__(128) unsigned char tiles[];  // 2 x 16 KiB
  const int bh = blockIdx.x;
  const int b = bh / kHeads, h = bh % kHeads;
  const int grp = threadIdx.x / 8, m = threadIdx.x % 8;
  const char *src = reinterpret_cast<const char *>(state) + size_t(bh) * kHeadElems * 2;
  uint4 v[4][2];
  load_rows4<kRead, true>(src, grp, m, bh, v);
  for (int t = 0; t < kT; ++t) {
    unsigned char *buf = tiles + (t & 1) * kHeadElems * 2;
    if (threadIdx.x == 0 && t >= 2) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        *reinterpret_cast<uint4 *>(buf + word_off(grp + 16 * r, j, m)) =
            bump(v[r][j], t);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      char *tile = inter + ((size_t(b) * kT + t) * kHeads + h) * kHeadElems * 2;
      const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(tile),
                   "r"(s), "r"(uint32_t(kHeadElems * 2))
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// The bulk-store kernel's variants: kBulkLoad: the block's 16 KiB state comes in by one bulk
// copy (global -> shared, completing on an mbarrier) instead of 16-byte loads; kHint: the
// bulk stores carry an L2 evict-first policy; kPrefetch256: the 16-byte loads ask L2 for
// 256-byte prefetches.
template <bool kBulkLoad, bool kHint, bool kPrefetch256>
__global__ void __launch_bounds__(128)
    fanout_bulk2(const uint4 *__restrict__ state, char *__restrict__ inter) {
  extern __shared__ __align__(128) unsigned char tiles[];  // 2 x 16 KiB out, 16 KiB in
  __shared__ __align__(8) uint64_t mbar;
  const int bh = blockIdx.x;
  const int b = bh / kHeads, h = bh % kHeads;
  const int grp = threadIdx.x / 8, m = threadIdx.x % 8;
  const char *src = reinterpret_cast<const char *>(state) + size_t(bh) * kHeadElems * 2;
  uint4 v[4][2];
  if constexpr (kBulkLoad) {
    unsigned char *in = tiles + 2 * kHeadElems * 2;
    const uint32_t mb = static_cast<uint32_t>(__cvta_generic_to_shared(&mbar));
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(mb) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(mb),
                   "r"(uint32_t(kHeadElems * 2))
                   : "memory");
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
          "[%3];" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(in))),
          "l"(src), "r"(uint32_t(kHeadElems * 2)), "r"(mb)
          : "memory");
    }
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
          "selp.u32 %0, 1, 0, p;\n\t}"
          : "=r"(done)
          : "r"(mb)
          : "memory");
    }
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        v[r][j] = *reinterpret_cast<const uint4 *>(
            in + word_off(grp + 16 * r, j, m));
  } else {
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const char *p = src + word_off(grp + 16 * r, j, m);
        if constexpr (kPrefetch256) {
          asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(v[r][j].x), "=r"(v[r][j].y), "=r"(v[r][j].z), "=r"(v[r][j].w)
                       : "l"(p));
        } else {
          v[r][j] = __ldcs(reinterpret_cast<const uint4 *>(p));
        }
      }
  }
  uint64_t policy = 0;
  if constexpr (kHint)
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  for (int t = 0; t < kT; ++t) {
    unsigned char *buf = tiles + (t & 1) * kHeadElems * 2;
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        *reinterpret_cast<uint4 *>(buf + word_off(grp + 16 * r, j, m)) =
            bump(v[r][j], t);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    // The store of token t - 1 has read its buffer before anyone writes it again (token t + 1).
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      char *tile = inter + ((size_t(b) * kT + t) * kHeads + h) * kHeadElems * 2;
      const uint32_t sa = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
      if constexpr (kHint) {
        asm volatile(
            "cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(
                tile),
            "r"(sa), "r"(uint32_t(kHeadElems * 2)), "l"(policy)
            : "memory");
      } else {
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(tile),
                     "r"(sa), "r"(uint32_t(kHeadElems * 2))
                     : "memory");
      }
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Row outer through the TMA: a pass of 16 rows (one per group) runs all T tokens, each
// token's 16 rows (4 KiB, contiguous) assembled in shared memory and written by one bulk copy;
// two pass buffers of T x 4 KiB.
template <bool kRead>
__global__ void __launch_bounds__(128)
    fanout_bulk_rows(const uint4 *__restrict__ state, char *__restrict__ inter) {
  extern __shared__ __align__(128) unsigned char tiles[];  // 2 x T x 4 KiB
  constexpr int kChunk = 16 * kDstate * 2;                 // 4 KiB
  const int bh = blockIdx.x;
  const int b = bh / kHeads, h = bh % kHeads;
  const int grp = threadIdx.x / 8, m = threadIdx.x % 8;
  const char *src = reinterpret_cast<const char *>(state) + size_t(bh) * kHeadElems * 2;
  for (int pass = 0; pass < kDim / 16; ++pass) {
    const int d = pass * 16 + grp;
    uint4 v[2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
      v[j] = kRead ? __ldcs(reinterpret_cast<const uint4 *>(
                         src + word_off(d, j, m)))
                   : uint4{uint32_t(d), uint32_t(j), threadIdx.x, uint32_t(bh)};
    unsigned char *buf = tiles + (pass & 1) * kT * kChunk;
    for (int t = 0; t < kT; ++t)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        *reinterpret_cast<uint4 *>(buf + t * kChunk + word_off(grp, j, m)) =
            bump(v[j], t);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int t = 0; t < kT; ++t) {
        char *dst = inter + ((size_t(b) * kT + t) * kHeads + h) * kHeadElems * 2 +
                    size_t(pass) * kChunk;
        const uint32_t sa = static_cast<uint32_t>(__cvta_generic_to_shared(buf + t * kChunk));
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
                     "r"(sa), "r"(uint32_t(kChunk))
                     : "memory");
      }
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Linear fan-out: 16-byte word i of src (n words) written to word i of each of kCopies
// consecutive n-word regions of dst (kCopies linear write streams and one linear read stream).
template <int kCopies>
__global__ void linear_fanout(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(src + i);
#pragma unroll
    for (int k = 0; k < kCopies; ++k) st16<true>(dst + k * n + i, bump(v, k));
  }
}

// Linear 16-byte writes over n words, grid-stride.
__global__ void linear_write(uint4 *p, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    st16<true>(p + i, uint4{uint32_t(i), 1u, 2u, 3u});
}

// Reads the state once (16-byte loads), the result folded into one word.
__global__ void read_only(const uint4 *p, size_t n, uint32_t *sink) {
  uint32_t acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

template <typename F>
float median_us(F &&launch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> v;
  for (int i = 0; i < 18; ++i) {
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 3) v.push_back(ms * 1000.0f);
  }
  CK(cudaGetLastError());
  std::sort(v.begin(), v.end());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return v[v.size() / 2];
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("mtp_write_roofline: %s, %d SMs; state %zu MiB read, %zu MiB written\n", prop.name,
              prop.multiProcessorCount, kStateBytes >> 20, kInterBytes >> 20);
  uint4 *state = nullptr;
  char *inter = nullptr;
  uint32_t *sink = nullptr;
  CK(cudaMalloc(&state, kStateBytes));
  CK(cudaMalloc(&inter, kInterBytes));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(state, 0x11, kStateBytes));

  const double gib = double(kInterBytes);
  const float memset_us = median_us([&] { CK(cudaMemsetAsync(inter, 0, kInterBytes)); });
  const double memset_gbs = gib / (memset_us * 1e-6) / 1e9;
  auto line = [&](const char *name, float us, double bytes) {
    const double gbs = bytes / (us * 1e-6) / 1e9;
    std::printf("%-44s %8.1f us  %6.0f GB/s  %5.1f %% of memset\n", name, us, gbs,
                100.0 * gbs / memset_gbs);
  };
  line("memset 1 GiB", memset_us, gib);
  const int sms = prop.multiProcessorCount;
  for (int per_sm : {4, 8, 16}) {
    char name[64];
    std::snprintf(name, sizeof name, "linear 16-byte writes, %d blocks/SM x 256", per_sm);
    line(name, median_us([&] {
           linear_write<<<sms * per_sm, 256>>>(reinterpret_cast<uint4 *>(inter), kInterBytes / 16);
         }),
         gib);
  }
  {
    const float us = median_us(
        [&] { read_only<<<sms * 8, 256>>>(state, kStateBytes / 16, sink); });
    std::printf("%-44s %8.1f us  %6.0f GB/s (read)\n", "state read alone (128 MiB)", us,
                double(kStateBytes) / (us * 1e-6) / 1e9);
  }
  const int grid = kBatch * kHeads;
#define RUN(ORDER, CS, READ, MINB, NAME) \
  line(NAME, median_us([&] { fanout<ORDER, CS, READ, MINB><<<grid, 128>>>(state, inter); }), gib)
  RUN(0, true, false, 1, "write only, row outer, cs");
  RUN(1, true, false, 1, "write only, token outer, cs");
  RUN(0, true, true, 1, "read + 8 writes, row outer, cs");
  RUN(2, true, true, 1, "read + 8 writes, two rows, cs");
  RUN(1, true, true, 1, "read + 8 writes, token outer, cs");
  RUN(0, false, true, 1, "read + 8 writes, row outer, plain");
  RUN(2, false, true, 1, "read + 8 writes, two rows, plain");
  RUN(1, false, true, 1, "read + 8 writes, token outer, plain");
#undef RUN
  // The two-row order at the two-row kernel's occupancy (5 blocks per SM): shared memory pads
  // the blocks to that count.
  {
    const size_t pad = prop.sharedMemPerMultiprocessor / 5 - 1024;
    CK(cudaFuncSetAttribute(fanout<2, true, true, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            int(pad)));
    CK(cudaFuncSetAttribute(fanout<1, true, true, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            int(pad)));
    line("read + 8 writes, two rows, cs, 5 blocks/SM",
         median_us([&] { fanout<2, true, true, 1><<<grid, 128, pad>>>(state, inter); }), gib);
    line("read + 8 writes, token outer, cs, 5 blocks/SM",
         median_us([&] { fanout<1, true, true, 1><<<grid, 128, pad>>>(state, inter); }), gib);
  }
  line("write only, token outer, 2 heads/block, sync",
       median_us([&] { fanout_sync<2, false><<<grid / 2, 256>>>(state, inter); }), gib);
  line("write only, token outer, 4 heads/block, sync",
       median_us([&] { fanout_sync<4, false><<<grid / 4, 512>>>(state, inter); }), gib);
  line("read + 8 writes, token outer, 1 head/block, sync",
       median_us([&] { fanout_sync<1, true><<<grid, 128>>>(state, inter); }), gib);
  line("read + 8 writes, token outer, 2 heads/block, sync",
       median_us([&] { fanout_sync<2, true><<<grid / 2, 256>>>(state, inter); }), gib);
  line("read + 8 writes, token outer, 4 heads/block, sync",
       median_us([&] { fanout_sync<4, true><<<grid / 4, 512>>>(state, inter); }), gib);
  line("read (from L2) + 8 writes, token outer, sync",
       median_us([&] { fanout_sync<1, true, true><<<grid, 128>>>(state, inter); }), gib);
  for (int per_sm : {4, 5, 8, 16}) {
    char name[64];
    std::snprintf(name, sizeof name, "read + 8 writes, persistent prefetch, %d/SM", per_sm);
    line(name, median_us([&] { fanout_persistent<<<sms * per_sm, 128>>>(state, inter); }), gib);
  }
  // A bulk-store kernel pair (write only, read + 8 writes) with smem bytes of dynamic shared
  // memory, one line each.
  using Fanout = void (*)(const uint4 *, char *);
  auto bulk_pair = [&](Fanout write_only, Fanout read_write, int smem, const char *write_name,
                       const char *read_write_name) {
    for (Fanout k : {write_only, read_write})
      CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    line(write_name, median_us([&] { write_only<<<grid, 128, smem>>>(state, inter); }), gib);
    line(read_write_name, median_us([&] { read_write<<<grid, 128, smem>>>(state, inter); }), gib);
  };
  bulk_pair(fanout_bulk<false>, fanout_bulk<true>, int(2 * kHeadElems * 2),
            "write only, token outer, TMA bulk stores",
            "read + 8 writes, token outer, TMA bulk stores");
  {
    const int sm2 = int(2 * kHeadElems * 2), sm3 = int(3 * kHeadElems * 2);
#define BULK2(L, H, P, SM, NAME)                                                              \
  CK(cudaFuncSetAttribute(fanout_bulk2<L, H, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, \
                          SM));                                                               \
  line(NAME, median_us([&] { fanout_bulk2<L, H, P><<<grid, 128, SM>>>(state, inter); }), gib)
    BULK2(false, false, false, sm2, "read + 8 writes, bulk stores (one wait)");
    BULK2(false, true, false, sm2, "read + 8 writes, bulk stores, L2 evict_first");
    BULK2(false, false, true, sm2, "read (L2::256B) + 8 writes, bulk stores");
    BULK2(true, false, false, sm3, "bulk read + 8 writes, bulk stores");
    BULK2(true, true, false, sm3, "bulk read + 8 writes, bulk stores, evict_first");
    // At fewer blocks per SM (shared memory padding): 4 and 2.
    BULK2(false, false, false, 56 * 1024, "read + 8 writes, bulk stores, 4 blocks/SM");
    BULK2(false, false, false, 110 * 1024, "read + 8 writes, bulk stores, 2 blocks/SM");
    BULK2(true, false, false, 56 * 1024, "bulk read + 8 writes, bulk stores, 4 blocks/SM");
#undef BULK2
    bulk_pair(fanout_bulk_rows<false>, fanout_bulk_rows<true>, int(2 * kT * 16 * kDstate * 2),
              "write only, row outer, 4 KiB bulk stores",
              "read + 8 writes, row outer, 4 KiB bulk stores");
  }
  {
    // Read + write mixes in linear streams, as total traffic (read + write) per second.
    auto total = [&](const char *name, float us, double bytes) {
      const double gbs = bytes / (us * 1e-6) / 1e9;
      std::printf("%-44s %8.1f us  %6.0f GB/s total  %5.1f %% of memset\n", name, us, gbs,
                  100.0 * gbs / memset_gbs);
    };
    const size_t half = kInterBytes / 2;
    total("cudaMemcpy D2D 512 MiB (read + write)",
          median_us([&] { CK(cudaMemcpyAsync(inter + half, inter, half, cudaMemcpyDeviceToDevice)); }),
          2.0 * half);
    // linear_fanout<K> of n words from src over blocks_per_sm x threads, and its bytes.
    auto fan = [&](const char *name, auto copies, const uint4 *src, size_t n, int blocks_per_sm,
                   int threads) {
      constexpr int K = decltype(copies)::value;
      total(name, median_us([&] {
              linear_fanout<K><<<sms * blocks_per_sm, threads>>>(
                  src, reinterpret_cast<uint4 *>(inter + (src == state ? 0 : half)), n);
            }),
            double(n) * 16 * (K + 1));
    };
    using One = std::integral_constant<int, 1>;
    using Four = std::integral_constant<int, 4>;
    using Eight = std::integral_constant<int, 8>;
    const uint4 *lower = reinterpret_cast<const uint4 *>(inter);
    fan("linear copy 1:1, 512 MiB", One{}, lower, half / 16, 8, 256);
    fan("linear fan-out 1:8 (128 MiB -> 1 GiB)", Eight{}, state, kStateBytes / 16, 8, 256);
    fan("linear fan-out 1:8, 4 blocks/SM", Eight{}, state, kStateBytes / 16, 4, 256);
    fan("linear fan-out 1:8, 16 blocks/SM x 128", Eight{}, state, kStateBytes / 16, 16, 128);
    fan("linear fan-out 1:4 (128 MiB -> 512 MiB)", Four{}, state, kStateBytes / 16, 8, 256);
    std::printf("(the SSU pattern at 80 %% of memset for its writes: %.0f GB/s total)\n",
                0.8 * memset_gbs * double(kStateBytes + kInterBytes) / double(kInterBytes));
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
