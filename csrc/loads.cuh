// loads.cuh — the SSU kernels' memory accesses and element conversions: fp16 / bf16 bits to and
// from fp32, element loads and stores of tensors whose dtype is a run-time value, the 4- and
// 8-byte vector loads of packed two-byte elements, streaming (L2 evict-first) stores, and the
// cache operators as inline PTX where the intrinsics would cost instructions (state loads that
// do not allocate in L1, L2 prefetches, the volatile shared loads of the Philox key table).
// Included by ssu.cuh (HotConfig, DynConfig, the body) and philox_words.cuh; a second SSU
// kernel includes it for the same accesses.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "arch.h"
#include "include/mamba_ssu.h"

namespace mamba_ssu {
namespace ssu {

// ---------------------------------------------------------------------------
// Element conversions
// ---------------------------------------------------------------------------

__device__ __forceinline__ float half_bits_to_float(uint32_t bits16) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16)));
}

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}

__device__ __forceinline__ uint32_t float_to_half_bits_rn(float v) {
  return __half_as_ushort(__float2half_rn(v));
}

__device__ __forceinline__ uint32_t float_to_bf16_bits_rn(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// Element idx of a tensor of the given float dtype, widened to fp32.
__device__ __forceinline__ float load_float(const void *p, int64_t idx, int32_t dtype) {
  if (dtype == MAMBA_SSU_F32) return static_cast<const float *>(p)[idx];
  const uint32_t bits = static_cast<const unsigned short *>(p)[idx];
  return dtype == MAMBA_SSU_F16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
}

// v rounded to nearest into element idx of a tensor of the given float dtype.
__device__ __forceinline__ void store_float(void *p, int64_t idx, int32_t dtype, float v) {
  if (dtype == MAMBA_SSU_F32) {
    static_cast<float *>(p)[idx] = v;
  } else {
    const uint32_t bits =
        dtype == MAMBA_SSU_F16 ? float_to_half_bits_rn(v) : float_to_bf16_bits_rn(v);
    static_cast<unsigned short *>(p)[idx] = static_cast<unsigned short>(bits);
  }
}

__device__ __forceinline__ int64_t load_index(const void *p, int64_t idx, int32_t dtype) {
  return dtype == MAMBA_SSU_I64 ? static_cast<const int64_t *>(p)[idx]
                                : static_cast<int64_t>(static_cast<const int32_t *>(p)[idx]);
}

// ---------------------------------------------------------------------------
// Vector loads and stores
// ---------------------------------------------------------------------------

// The 8 bytes at p (8-byte aligned) as two words, the lower address in x.
__device__ __forceinline__ uint2 load_u32x2(const void *p) {
  return *reinterpret_cast<const uint2 *>(p);
}

// The 4 bytes at p (4-byte aligned).
__device__ __forceinline__ uint32_t load_u32(const void *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}

// Streaming stores (st.global.cs: L2 evict-first), for data that is not read again soon: the
// SSU's state, read again only at the next decode step (see HotConfig::store_state).
__device__ __forceinline__ void store_cs_u32x2(void *p, uint32_t w0, uint32_t w1) {
  __stcs(reinterpret_cast<uint2 *>(p), make_uint2(w0, w1));
}
__device__ __forceinline__ void store_cs_u32(void *p, uint32_t w) {
  __stcs(static_cast<uint32_t *>(p), w);
}
__device__ __forceinline__ void store_cs_u16(void *p, uint32_t bits16) {
  __stcs(static_cast<unsigned short *>(p), static_cast<unsigned short>(bits16));
}

// ---------------------------------------------------------------------------
// Cache operators as inline PTX
// ---------------------------------------------------------------------------

// The 8 bytes at p + kOffset without allocating them in L1 (ld.global.L1::no_allocate: for bytes
// read once). kOffset is the instruction's immediate offset, so that loads of consecutive rows
// from one base keep their addresses folded (the `__ldcs`-style intrinsics are opaque asm that
// takes a register address, which costs the address arithmetic per load). The asm has no memory
// clobber: the caller guarantees that no store of the kernel writes these bytes before the load
// (the SSU's state rows are written only after their values are read, by the same lane).
template <int kOffset>
__device__ __forceinline__ uint2 load_no_allocate_u32x2(const void *p) {
  uint2 v;
  asm("ld.global.L1::no_allocate.v2.u32 {%0, %1}, [%2+%3];"
      : "=r"(v.x), "=r"(v.y) : "l"(p), "n"(kOffset));
  return v;
}

// One bulk prefetch of `bytes` bytes at p (16-byte aligned, a multiple of 16 bytes) into L2
// (cp.async.bulk.prefetch.L2: one instruction for a whole range, by one lane). A hint: below
// sm_90, which has no bulk copy unit, and under MAMBA_SSU_SM80_PATHS (arch.h) it is a no-op.
__device__ __forceinline__ void prefetch_l2_bulk(const void *p, uint32_t bytes) {
#if MAMBA_SSU_HAS_BULK_PREFETCH
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p;
  (void)bytes;
#endif
}

// A volatile load of the shared-memory word at p (a generic pointer into shared memory): opaque
// to the compiler, so that a value computed before the load is not re-derived after it (see
// philox_words.cuh, the key table).
__device__ __forceinline__ uint32_t load_shared_volatile(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.volatile.shared.u32 %0, [%1];"
               : "=r"(v)
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(p))));
  return v;
}

}  // namespace ssu
}  // namespace mamba_ssu
