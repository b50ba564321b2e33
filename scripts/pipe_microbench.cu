// pipe_microbench.cu — throughput of the integer operations Philox is made of, on the GPU at
// hand: IMAD (32-bit multiply-add), IMAD.HI, IMAD.WIDE (32 x 32 -> 64), LOP3, FFMA, and a
// Philox4x32 round written three ways. Used to decide how to write the SSU's Philox
// (docs/perf-notes.md, 'what the profiler and a micro-benchmark said' (2026-11-30)). On the
// H200 (docs/gpu-runs/2026-11-30.md, the 15:40 UTC runs,
// measured with the first version of this program: the same kernels, other output format):
// IMAD 63.7 and LOP3 63.1 operations per clock per SM, FFMA 122.5, IMAD.HI 30.0, IMAD.WIDE
// 24.7 (its chain has a LOP3 too); Philox rounds 30.6 wide multiplies per clock per SM with
// IMAD.WIDE and 21.6 split into IMAD.HI + IMAD (42 % more time: both halves use the same
// half-rate pipe). This version has not run on the GPU yet.
//
// Build and run (needs nvcc; the CUDA runtime is linked statically, so the binary runs on a
// host with only the driver):
//   nvcc -O3 -arch=sm_90 -std=c++17 scripts/pipe_microbench.cu -o pipe_microbench \
//        -L$CUDA/lib -lcudart_static -ldl -lpthread -lrt
//   ./pipe_microbench
// Figures are operations per clock per SM at the device's maximum clock (so a clock below the
// maximum under load reads as lower throughput; compare the lines with each other).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {

constexpr uint32_t kM0 = 0xD2511F53u;
constexpr uint32_t kM1 = 0xCD9E8D57u;

struct U4 {
  uint32_t x, y, z, w;
};

// One Philox4x32 round. kMode 0: __umulhi + multiply (the compiler fuses each pair into one
// IMAD.WIDE.U32); 1: mul.wide.u32 as a 64-bit product; 2: IMAD.HI plus a multiply-add of an
// opaque zero, which the compiler cannot fuse (IMAD.HI + IMAD).
template <int kMode>
__device__ __forceinline__ U4 round(U4 c, uint32_t k0, uint32_t k1, uint32_t zero) {
  uint32_t hi0, lo0, hi1, lo1;
  if constexpr (kMode == 0) {
    hi0 = __umulhi(kM0, c.x);
    lo0 = kM0 * c.x;
    hi1 = __umulhi(kM1, c.z);
    lo1 = kM1 * c.z;
  } else if constexpr (kMode == 1) {
    uint64_t p0, p1;
    asm("mul.wide.u32 %0, %1, %2;" : "=l"(p0) : "r"(c.x), "n"(kM0));
    asm("mul.wide.u32 %0, %1, %2;" : "=l"(p1) : "r"(c.z), "n"(kM1));
    hi0 = static_cast<uint32_t>(p0 >> 32);
    lo0 = static_cast<uint32_t>(p0);
    hi1 = static_cast<uint32_t>(p1 >> 32);
    lo1 = static_cast<uint32_t>(p1);
  } else {
    hi0 = __umulhi(kM0, c.x);
    hi1 = __umulhi(kM1, c.z);
    asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(lo0) : "r"(c.x), "n"(kM0), "r"(zero));
    asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(lo1) : "r"(c.z), "n"(kM1), "r"(zero));
  }
  return U4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
}

// kStreams independent Philox streams per thread, 10 rounds per iteration.
template <int kMode, int kStreams>
__global__ void philox_kernel(uint32_t *out, int iters, uint32_t k0, uint32_t k1,
                              uint32_t zero) {
  U4 c[kStreams];
  for (int s = 0; s < kStreams; ++s) c[s] = U4{threadIdx.x + s * 77u, blockIdx.x, 0, 0};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
#pragma unroll
      for (int s = 0; s < kStreams; ++s) c[s] = round<kMode>(c[s], k0 + r, k1 - r, zero);
    }
  }
  uint32_t acc = 0;
  for (int s = 0; s < kStreams; ++s) acc ^= c[s].x ^ c[s].y ^ c[s].z ^ c[s].w;
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// 8 independent chains of one operation. kOp 0: IMAD; 1: LOP3; 2: IMAD.HI; 3: FFMA;
// 4: IMAD.WIDE (+ one LOP3 to fold the halves).
template <int kOp>
__global__ void op_kernel(uint32_t *out, int iters, uint32_t k) {
  constexpr int kChains = 8;
  uint32_t v[kChains];
  float f[kChains];
  for (int s = 0; s < kChains; ++s) {
    v[s] = threadIdx.x * 3 + s;
    f[s] = static_cast<float>(v[s]);
  }
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int r = 0; r < 16; ++r) {
#pragma unroll
      for (int s = 0; s < kChains; ++s) {
        if constexpr (kOp == 0) {
          v[s] = v[s] * k + r;
        } else if constexpr (kOp == 1) {
          v[s] = v[s] ^ (k + s) ^ v[(s + 1) % kChains];
        } else if constexpr (kOp == 2) {
          v[s] = __umulhi(v[s], k) + r;
        } else if constexpr (kOp == 3) {
          f[s] = __fmaf_rn(f[s], 1.0001f, 0.5f);
        } else {
          const uint64_t p = static_cast<uint64_t>(v[s]) * k;
          v[s] = static_cast<uint32_t>(p >> 32) ^ static_cast<uint32_t>(p);
        }
      }
    }
  }
  uint32_t acc = 0;
  for (int s = 0; s < kChains; ++s) acc ^= v[s] ^ __float_as_uint(f[s]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

bool ok(cudaError_t e, const char *what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

// Best of 5 timings (ms) of launch(), after one warm-up.
template <class F>
float time_best(F launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  launch();
  cudaDeviceSynchronize();
  float best = 1e30f;
  for (int t = 0; t < 5; ++t) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (ms < best) best = ms;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

}  // namespace

int main() {
  int sms = 0, clock_khz = 0;
  if (!ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "device query") ||
      !ok(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0), "device query"))
    return 1;
  const int blocks = sms * 8, threads = 256, iters = 2000;
  uint32_t *out = nullptr;
  if (!ok(cudaMalloc(&out, sizeof(uint32_t) * blocks * threads), "cudaMalloc")) return 1;
  const double nthreads = static_cast<double>(blocks) * threads;
  std::printf("%d SMs, max clock %d MHz; operations per clock per SM:\n", sms, clock_khz / 1000);
  auto report = [&](const char *name, float ms, double ops_per_thread) {
    const double rate = nthreads * ops_per_thread / (ms * 1e-3) / sms / (clock_khz * 1e3);
    std::printf("  %-44s %8.3f ms  %7.2f\n", name, ms, rate);
  };
  const double wide_per_thread = 2.0 * 10 * 4 * iters;  // wide multiplies, 4 streams
  report("Philox, __umulhi + mul (IMAD.WIDE)",
         time_best([&] { philox_kernel<0, 4><<<blocks, threads>>>(out, iters, 1, 2, 0); }),
         wide_per_thread);
  report("Philox, mul.wide.u32",
         time_best([&] { philox_kernel<1, 4><<<blocks, threads>>>(out, iters, 1, 2, 0); }),
         wide_per_thread);
  report("Philox, IMAD.HI + IMAD (split)",
         time_best([&] { philox_kernel<2, 4><<<blocks, threads>>>(out, iters, 1, 2, 0); }),
         wide_per_thread);
  const double ops_per_thread = 16.0 * 8 * iters;
  report("IMAD", time_best([&] { op_kernel<0><<<blocks, threads>>>(out, iters, 3); }),
         ops_per_thread);
  report("LOP3", time_best([&] { op_kernel<1><<<blocks, threads>>>(out, iters, 3); }),
         ops_per_thread);
  report("IMAD.HI", time_best([&] { op_kernel<2><<<blocks, threads>>>(out, iters, 3); }),
         ops_per_thread);
  report("FFMA", time_best([&] { op_kernel<3><<<blocks, threads>>>(out, iters, 3); }),
         ops_per_thread);
  report("IMAD.WIDE (+ LOP3)",
         time_best([&] { op_kernel<4><<<blocks, threads>>>(out, iters, 3); }), ops_per_thread);
  const bool good = ok(cudaGetLastError(), "kernels") && ok(cudaFree(out), "cudaFree");
  return good ? 0 : 1;
}
