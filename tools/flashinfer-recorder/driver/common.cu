// Device helpers of the recorder driver (project code) and the runs of FlashInfer's own device
// primitives (Philox, software stochastic rounding) recorded as the manifest's
// `primitive_checks`. Compiled with the same flags as the instantiation groups.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "firec.h"
#include "firec_timing.h"

#if FIREC_HAS_PRIMITIVES
#include <cuda_fp16.h>
#include <flashinfer/mamba/conversion.cuh>
#endif

namespace {

int firec_status(cudaError_t st, char* err, int errlen) {
  if (st == cudaSuccess) return 0;
  if (err != nullptr && errlen > 0) {
    std::snprintf(err, static_cast<size_t>(errlen), "%s", cudaGetErrorString(st));
  }
  return 2;
}

#if FIREC_HAS_PRIMITIVES
template <int R>
__global__ void firec_philox_kernel(int64_t seed, int64_t offset, uint32_t* out) {
  flashinfer::mamba::conversion::philox_randint4x<R>(seed, offset, out[0], out[1], out[2],
                                                     out[3]);
}

__global__ void firec_cvt_kernel(uint32_t x_bits, uint32_t rand13, uint16_t* out) {
  *out = __half_as_ushort(
      flashinfer::mamba::conversion::cvt_rs_f16_f32(__uint_as_float(x_bits), rand13));
}
#endif

}  // namespace

extern "C" {

int firec_abi_version(void) { return FIREC_ABI_VERSION; }

int firec_sizeof_args(void) { return static_cast<int>(sizeof(firec_args)); }

int firec_device_info(int* sms, int* cc_major, int* cc_minor, int64_t* l2_bytes, char* name,
                      int namelen, int* driver_version, int* runtime_version) {
  int dev = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&dev) != cudaSuccess) return 2;
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return 2;
  *sms = prop.multiProcessorCount;
  *cc_major = prop.major;
  *cc_minor = prop.minor;
  *l2_bytes = prop.l2CacheSize;
  std::snprintf(name, static_cast<size_t>(namelen), "%s", prop.name);
  cudaDriverGetVersion(driver_version);
  cudaRuntimeGetVersion(runtime_version);
  return 0;
}

int firec_malloc(void** ptr, uint64_t bytes, char* err, int errlen) {
  return firec_status(cudaMalloc(ptr, bytes == 0 ? 1 : bytes), err, errlen);
}

int firec_free(void* ptr) { return cudaFree(ptr) == cudaSuccess ? 0 : 2; }

int firec_h2d(void* dst, const void* src, uint64_t bytes, char* err, int errlen) {
  return firec_status(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), err, errlen);
}

int firec_d2h(void* dst, const void* src, uint64_t bytes, char* err, int errlen) {
  return firec_status(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), err, errlen);
}

int firec_memset(void* dst, int value, uint64_t bytes, char* err, int errlen) {
  return firec_status(cudaMemset(dst, value, bytes), err, errlen);
}

int firec_sync(char* err, int errlen) { return firec_status(cudaDeviceSynchronize(), err, errlen); }

int firec_time(firec_entry entry, const firec_args* args, int warmup, int iters, double* us,
               char* err, int errlen) {
  firec_args a = *args;
  a.no_sync = 1;
  for (int i = 0; i < warmup; ++i) {
    int st = entry(&a, err, errlen);
    if (st != 0) return st;
  }
  cudaEvent_t start, stop;
  if (int st = firec_status(cudaEventCreate(&start), err, errlen)) return st;
  if (int st = firec_status(cudaEventCreate(&stop), err, errlen)) return st;
  cudaEventRecord(start);
  for (int i = 0; i < iters; ++i) {
    int st = entry(&a, err, errlen);
    if (st != 0) return st;
  }
  cudaEventRecord(stop);
  int st = firec_status(cudaEventSynchronize(stop), err, errlen);
  float ms = 0.f;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  *us = 1000.0 * ms / (iters > 0 ? iters : 1);
  return st;
}

// The spin kernel of firec_time_queued: one thread waits `cycles` GPU clock cycles.
__global__ void firec_spin_kernel(int64_t cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

int firec_time_queued(firec_entry entry, const firec_args* args, int warmup, int iters,
                      int64_t spin_cycles, double* us, double* spin_us, double* host_us, char* err,
                      int errlen) {
  return firec_time_queued_rotating(entry, args, 1, 0, warmup, iters, spin_cycles, us, spin_us,
                                    host_us, err, errlen);
}

int firec_time_queued_rotating(firec_entry entry, const firec_args* args, int copies,
                               int64_t state_stride_bytes, int warmup, int iters,
                               int64_t spin_cycles, double* us, double* spin_us, double* host_us,
                               char* err, int errlen) {
  if (copies < 1) {
    std::snprintf(err, errlen, "firec_time_queued_rotating: copies must be >= 1, got %d", copies);
    return 1;
  }
  firec_args a = *args;
  a.no_sync = 1;
  int64_t k = 0;
  // The call's state: copy k mod copies.
  auto next = [&]() {
    a.state = static_cast<char*>(args->state) + (k % copies) * state_stride_bytes;
    ++k;
  };
  for (int i = 0; i < warmup; ++i) {
    next();
    int st = entry(&a, err, errlen);
    if (st != 0) return st;
  }
  if (int st = firec_status(cudaDeviceSynchronize(), err, errlen)) return st;
  cudaEvent_t ev[3];
  for (auto& e : ev)
    if (int st = firec_status(cudaEventCreate(&e), err, errlen)) return st;
  // Every launch below goes to the legacy default stream, the stream FlashInfer's launcher is
  // given (nullptr) by the group entry points.
  cudaEventRecord(ev[0]);
  firec_spin_kernel<<<1, 1>>>(spin_cycles);
  cudaEventRecord(ev[1]);
  const auto h0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    next();
    int st = entry(&a, err, errlen);
    if (st != 0) return st;
  }
  const auto h1 = std::chrono::steady_clock::now();
  cudaEventRecord(ev[2]);
  int st = firec_status(cudaEventSynchronize(ev[2]), err, errlen);
  float spin_ms = 0.f, ms = 0.f;
  cudaEventElapsedTime(&spin_ms, ev[0], ev[1]);
  cudaEventElapsedTime(&ms, ev[1], ev[2]);
  for (auto& e : ev) cudaEventDestroy(e);
  *us = 1000.0 * ms / (iters > 0 ? iters : 1);
  *spin_us = 1000.0 * spin_ms;
  *host_us = std::chrono::duration<double, std::micro>(h1 - h0).count();
  return st;
}

int firec_philox4x(int rounds, int64_t seed, int64_t offset, uint32_t out[4], char* err,
                   int errlen) {
#if FIREC_HAS_PRIMITIVES
  uint32_t* d = nullptr;
  if (int st = firec_status(cudaMalloc(&d, 16), err, errlen)) return st;
  if (rounds == 5) {
    firec_philox_kernel<5><<<1, 1>>>(seed, offset, d);
  } else if (rounds == 10) {
    firec_philox_kernel<10><<<1, 1>>>(seed, offset, d);
  } else {
    cudaFree(d);
    std::snprintf(err, static_cast<size_t>(errlen), "rounds must be 5 or 10");
    return 1;
  }
  int st = firec_status(cudaMemcpy(out, d, 16, cudaMemcpyDeviceToHost), err, errlen);
  cudaFree(d);
  return st;
#else
  (void)rounds, (void)seed, (void)offset, (void)out;
  std::snprintf(err, static_cast<size_t>(errlen), "not built: the release's headers lack the primitives");
  return 1;
#endif
}

int firec_cvt_rs_f16(uint32_t x_bits, uint32_t rand13, uint16_t* out, char* err, int errlen) {
#if FIREC_HAS_PRIMITIVES
  uint16_t* d = nullptr;
  if (int st = firec_status(cudaMalloc(&d, 2), err, errlen)) return st;
  firec_cvt_kernel<<<1, 1>>>(x_bits, rand13, d);
  int st = firec_status(cudaMemcpy(out, d, 2, cudaMemcpyDeviceToHost), err, errlen);
  cudaFree(d);
  return st;
#else
  (void)x_bits, (void)rand13, (void)out;
  std::snprintf(err, static_cast<size_t>(errlen), "not built: the release's headers lack the primitives");
  return 1;
#endif
}

}  // extern "C"
