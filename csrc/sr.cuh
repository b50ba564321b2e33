// sr.cuh — stochastic rounding (SR) of fp32 state values to fp16 in software, as FlashInfer
// 0.7.2 does on sm_90, bit for bit: the reference formula (sr_fp16_magnitude, sr_pair_exact),
// the pair conversions through cvt.rz.f16x2.f32 that match it except for flagged pairs
// (sr_pair_fast: the generic and one-row kernels) or that fix the low side in place
// (sr_pair_fast_low: the hot kernels' chunks), and the checks that send a row or a chunk to the
// exact path. The 13 random bits per element come from philox_words.cuh.
// On sm_100a and sm_103a (arch.h: MAMBA_SSU_HAS_CVT_RS) every conversion here is the hardware
// cvt.rs.f16x2.f32 with the same 13 random bits per element, as FlashInfer's kernels convert
// there (both releases): nothing is flagged for the exact path, which, when a kernel takes it
// for its own reasons (a chunk's Philox counter crossing 2^32, a NaN probe), converts the same
// way.
// Included by ssu.cuh (the single-token body); a second SSU kernel includes it for the same
// conversion.
#pragma once

#include <cuda_fp16.h>
#include <stdint.h>

#include "arch.h"
#include "include/mamba_ssu.h"

namespace mamba_ssu {
namespace ssu {

// The reference, for v with bits b and 13 random bits r: a = (b & 0x7FFFFFFF)
// + r (u32); e = (a >> 23) & 0xFF, m = a & 0x7FFFFF; e == 255: NaN 0x7E00 if
// m != 0 else Inf 0x7C00; e > 142: Inf; e < 113: 0; else ((e - 112) << 10) |
// (m >> 13); then the sign bit of b as bit 15.
//
// Computed here on a2 = (b + r) << 1 = (2a) mod 2^32: the carry out of the
// magnitude (a NaN near 0x7FFFFFFF, e.g. the canonical NaN, plus r) falls off
// the top exactly as the reference's & 0xFF drops it, e = a2 >> 24 and
// a2 >> 14 = (e << 10) | (m >> 13). So, comparing a2 unsigned:
//   a2 < 113 << 24 -> 0; a2 > 0xFF000000 (e == 255, m != 0) -> 0x7E00;
//   otherwise min((a2 >> 14) - (112 << 10), 0x7C00) (e > 142 gives >= 0x7C00).
// Returns the magnitude bits (the sign is merged when two are packed).
__device__ __forceinline__ uint32_t sr_fp16_magnitude(float v, uint32_t r13) {
  // The shift as PTX keeps the compiler from splitting a2 >> 14 into
  // ((b + r) >> 13) & 0x3FFFF, which costs one more instruction.
  uint32_t a2;
  asm("shl.b32 %0, %1, 1;" : "=r"(a2) : "r"(__float_as_uint(v) + r13));
  int32_t h = static_cast<int32_t>(a2 >> 14) - (112 << 10);
  h = min(h, 0x7c00);
  h = a2 < (113u << 24) ? 0 : h;
  h = a2 > 0xff000000u ? 0x7e00 : h;
  return static_cast<uint32_t>(h);
}

#if MAMBA_SSU_HAS_CVT_RS
// The hardware conversion of v0 (low half) and v1 (high half) with 13 random bits each (r0, r1:
// their low 13 bits). cvt.rs.f16x2.f32 d, a, b, rbits puts a's result in d's upper half with
// the 13 low bits of rbits' upper half, and b's in the lower half with those of its lower half.
// The semantics as PTX documents them are modelled on the CPU by
// reference::sr::cvt_rs_f16 (src/reference/sr.rs).
__device__ __forceinline__ uint32_t sr_pair_hw(float v0, float v1, uint32_t r0, uint32_t r1) {
  uint32_t d;
  asm("cvt.rs.f16x2.f32 %0, %1, %2, %3;"
      : "=r"(d)
      : "f"(v1), "f"(v0), "r"(((r1 & 0x1fffu) << 16) | (r0 & 0x1fffu)));
  return d;
}
#endif

// The running maximum of the magnitudes of two fp16 values h (a word) in hmax, NaN-propagating:
// one max.NaN.xorsign.abs.f16x2 (sm_86+; hmax's halves then carry xorsign signs), or on sm_80 the
// sign bits cleared and max.NaN.f16x2 (the same magnitudes). Readers mask the sign bits.
__device__ __forceinline__ void sr_hmax_abs(uint32_t &hmax, uint32_t h) {
#if MAMBA_SSU_HAS_F16X2_XORSIGN_ABS
  asm("max.NaN.xorsign.abs.f16x2 %0, %0, %1;" : "+r"(hmax) : "r"(h));
#else
  asm("max.NaN.f16x2 %0, %0, %1;" : "+r"(hmax) : "r"(h & 0x7fff7fffu));
#endif
}

// Two stochastically rounded fp16 values (magnitudes h0, h1 of v0, v1) as
// one word, v0 in the low half, with the signs of v0 and v1.
__device__ __forceinline__ uint32_t sr_pack(uint32_t h0, uint32_t h1, float v0, float v1) {
  const uint32_t signs = __byte_perm(__float_as_uint(v0), __float_as_uint(v1), 0x7632);
  return __byte_perm(h0, h1, 0x5410) | (signs & 0x80008000u);
}

// Two stochastically rounded fp16 values of v0 (low half) and v1 with random
// bits r0, r1, equal to sr_pair_exact (the reference) unless the pair is
// flagged, with most of the work on the conversion unit instead of the
// integer ALU. The flags of a row's pairs are OR-ed together and tested once
// (sr_needs_exact): a flagged row is converted again with sr_pair_exact.
// a = b + r keeps b's sign, and for 2^-14 <= |a| < 65504 the reference is
// exactly a truncated to fp16 (e in 113..142: ((e - 112) << 10) | (m >> 13)),
// i.e. cvt.rz.f16x2.f32 of a. Every other result takes the exact path: a
// truncated magnitude below 0x0400 (zero, fp16-subnormal: the reference
// flushes to 0; also a NaN whose + r carried into the sign bit) or at least
// 0x7BFF (65504, where truncation saturates but the reference may give Inf;
// Inf and NaN). Both halves are tested at once: adding 0x0401 to a half sets
// its bit 15 iff it is >= 0x7BFF, adding 0x7C00 leaves bit 15 clear iff it is
// < 0x0400 (no carry crosses halves: every half is <= 0x7FFF).
//
// An unflagged pair is also exactly FlashInfer 0.7.4's conversion (sr_fp16_magnitude_v074), so
// the generic kernel serves both rules with this one fast path and a rule-dependent exact path
// (sr_pair_exact_rule). With A = |v|'s bits (the integer, sign dropped) and t = the magnitude
// of the truncated half, for each input:
// - v finite: A <= 0x7F7FFFFF, so A + r < 2^31 and b + r = sign | (A + r) (no carry reaches the
//   sign bit; the half's sign is v's). A + r an fp32 Inf or NaN gives t >= 0x7C00 (flagged);
//   A + r >= 65504 truncates to t = 0x7BFF (cvt.rz saturates; flagged); A + r < 2^-14 gives
//   t < 0x0400 (zero or fp16-subnormal; flagged). Unflagged: 2^-14 <= A + r < 65504 and t =
//   ((A + r) >> 13) - (112 << 10). If A >= 2^-14 (e >= 113), 0.7.4's s = A - (112 << 23) and
//   (s + r) >> 13 = t (112 << 23 is a multiple of 2^13), below its min with 0x7C00. If A <
//   2^-14, then A + r >= 2^-14 = 113 << 23 needs e = 112 (from e <= 111, A + r < (112 << 23)
//   + 2^13) and m + r >= 2^23 (m = A's fraction, r >= 1), so t = 0x0400; 0.7.4's s = (m |
//   2^23) >> 1 = 2^22 + floor(m / 2) >= 2^22 + (2^23 - r - 1) / 2, s + r >= 2^23 + (r - 1) / 2
//   >= 2^23, and s + r <= 2^22 + 2^22 + 2^13 - 2 < 2^23 + 2^13: (s + r) >> 13 = 0x0400 = t.
// - v = +-Inf: A + r is Inf (r = 0) or a NaN: t >= 0x7C00, flagged.
// - v NaN: A + r <= 0x7FFFFFFF is a NaN (t >= 0x7C01, flagged), or A + r carries into bit 31:
//   b + r is then 0x80000000 + (A + r - 2^31) (v positive) or, wrapping past 2^32, A + r -
//   2^31 (v negative), with A + r - 2^31 < 2^13: an fp32 zero or subnormal of either sign,
//   which truncates to t = 0 < 0x0400, flagged (the exact path then gives 0.7.2's zero or
//   0.7.4's canonical NaN).
// So every pair the exact path does not redo has 2^-14 <= |result| < 65504, where both rules
// agree with the truncation, signs included (sr_pack puts back v's sign, equal to the half's).
__device__ __forceinline__ uint32_t sr_pair_fast(float v0, float v1, uint32_t r0, uint32_t r1,
                                                 uint32_t &flags) {
#if MAMBA_SSU_HAS_CVT_RS
  (void)flags;
  return sr_pair_hw(v0, v1, r0, r1);
#else
  const float a0 = __uint_as_float(__float_as_uint(v0) + r0);
  const float a1 = __uint_as_float(__float_as_uint(v1) + r1);
  uint32_t h;
  asm("cvt.rz.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(a1), "f"(a0));  // a1 -> upper half
  const uint32_t m = h & 0x7fff7fffu;
  flags |= (m + 0x04010401u) | ~(m + 0x7c007c00u);
  return h;
#endif
}

// The exact conversion of the pair (the 0.7.2 reference formula), for rows whose flags are set.
__device__ __forceinline__ uint32_t sr_pair_exact(float v0, float v1, uint32_t r0, uint32_t r1) {
#if MAMBA_SSU_HAS_CVT_RS
  return sr_pair_hw(v0, v1, r0, r1);
#else
  return sr_pack(sr_fp16_magnitude(v0, r0), sr_fp16_magnitude(v1, r1), v0, v1);
#endif
}

// FlashInfer 0.7.4's conversion (MAMBA_SSU_SR_V074), for v with 13 random bits r: with
// a = |v| as fp32 bits, e = a >> 23 and the full significand M = (a & 0x7FFFFF) | 0x800000,
// s = a - (112 << 23) for e >= 113 (the normal fp16 range), M >> (113 - e) for 90 <= e < 113
// (the fp16 subnormal grid in the same units), 0 below; magnitude = min((s + r) >> 13,
// 0x7C00); then a NaN input (a > 0x7F800000) gives 0x7E00 and an Inf input 0x7C00. Returns the
// magnitude bits (sr_pack merges the sign). For finite |v| >= 2^-14 with a finite result it is
// the 0.7.2 magnitude (sr_fp16_magnitude).
__device__ __forceinline__ uint32_t sr_fp16_magnitude_v074(float v, uint32_t r13) {
  const uint32_t a = __float_as_uint(v) & 0x7fffffffu;
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t s = e >= 113u ? a - (112u << 23) : (e >= 90u ? m >> (113u - e) : 0u);
  uint32_t h = min((s + r13) >> 13, 0x7c00u);
  h = a == 0x7f800000u ? 0x7c00u : h;
  h = a > 0x7f800000u ? 0x7e00u : h;
  return h;
}

// The exact 0.7.4 conversion of a pair (v0 in the low half), signs of v0 and v1.
__device__ __forceinline__ uint32_t sr_pair_exact_v074(float v0, float v1, uint32_t r0,
                                                       uint32_t r1) {
#if MAMBA_SSU_HAS_CVT_RS
  return sr_pair_hw(v0, v1, r0, r1);
#else
  return sr_pack(sr_fp16_magnitude_v074(v0, r0), sr_fp16_magnitude_v074(v1, r1), v0, v1);
#endif
}

// The exact conversion of a pair under a rule chosen at run time (mamba_ssu_sr_rule).
__device__ __forceinline__ uint32_t sr_pair_exact_rule(float v0, float v1, uint32_t r0,
                                                       uint32_t r1, int32_t rule) {
  return rule == MAMBA_SSU_SR_V074 ? sr_pair_exact_v074(v0, v1, r0, r1)
                                   : sr_pair_exact(v0, v1, r0, r1);
}

// Whether flags accumulated by sr_pair_fast mark any pair for the exact path.
__device__ __forceinline__ bool sr_needs_exact(uint32_t flags) {
  return (flags & 0x80008000u) != 0;
}

// The random add of the hot kernels' fast path (sr_pair_fast_low): bits + (w mod 2^13).
// kMadHi: as mad.hi(w << 19, 2^13, bits), which ptxas turns into an IMAD and a LEA.HI, and for
// the last Philox round's low words folds the shift into the product (an IMAD by M << 19
// instead of the wide multiply's low half); else a mask (LOP3) and an add.
template <bool kMadHi>
__device__ __forceinline__ uint32_t sr_add13(uint32_t bits, uint32_t w) {
  if constexpr (kMadHi) {
    uint32_t t, a;
    asm("mul.lo.u32 %0, %1, 524288;" : "=r"(t) : "r"(w));
    asm("mad.hi.u32 %0, %1, 8192, %2;" : "=r"(a) : "r"(t), "r"(bits));
    return a;
  } else {
    return bits + (w & 0x1fffu);
  }
}

// The hot kernels' fast path: results below 2^-14 need no branch and only the rare large ones
// (and NaN) are sent to the exact path, once per chunk. A pair truncated by cvt.rz is correct
// except where its magnitude is below 0x0400 (the reference gives a signed zero: e < 113) or at
// least 0x7BFF (saturated, Inf, NaN). The low case is fixed in place: a half-precision compare
// gives a 0xFFFF mask per half where |h| >= 2^-14, and h & (mask | sign bits) zeroes the
// magnitude elsewhere and keeps h's sign, which is v's sign because a = v + r changes the sign
// only when v is a NaN whose magnitude carries into the sign bit (the reference then gives a
// zero with v's sign; the chunk's NaN test sends those to the exact path). The high case is
// tracked by a running NaN-propagating maximum of |h| (two half-precision instructions per
// pair in all) and tested once per chunk (sr_chunk_bad).
//
// kFtz: the low case by one half-precision multiply by 1 with flush-to-zero (HMUL2.FTZ, on the
// FMA pipe; subnormal inputs and results become zeros of the same sign) instead of the compare
// and the LOP3 (the integer ALU is the pipe the 10-round kernels wait on). Normal values are
// unchanged (x * 1 is exact); NaN payloads may change, but a chunk with a NaN is redone exactly.
// kHalfAcc: the high side is tracked by a half-precision FMA accumulator, acc = h * 2.0019531 +
// acc (FMA or MMA pipe), instead of the running maximum (HMNMX2): |h| >= 65504 (or Inf, NaN)
// makes the accumulator non-finite whatever it held, since a finite accumulator is at most
// 65504 in magnitude and |h| * 2.0019531 - 65504 >= 65520 rounds to Inf, and Inf and NaN stay
// non-finite; large sums of smaller values only cause false alarms (the exact path then
// recomputes a correct chunk).
template <bool kFtz, bool kMadHi, bool kHalfAcc>
__device__ __forceinline__ uint32_t sr_pair_fast_low(float v0, float v1, uint32_t w0, uint32_t w1,
                                                     uint32_t &hmax) {
#if MAMBA_SSU_HAS_CVT_RS
  (void)hmax;
  return sr_pair_hw(v0, v1, w0, w1);
#else
  const float a0 = __uint_as_float(sr_add13<kMadHi>(__float_as_uint(v0), w0));
  const float a1 = __uint_as_float(sr_add13<kMadHi>(__float_as_uint(v1), w1));
  uint32_t h;
  asm("cvt.rz.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(a1), "f"(a0));  // a1 -> upper half
  if constexpr (kHalfAcc) {
    asm("fma.rn.f16x2 %0, %1, %2, %0;" : "+r"(hmax) : "r"(h), "r"(0x40014001u));
  } else {
    sr_hmax_abs(hmax, h);
  }
  if constexpr (kFtz) {
    uint32_t f;
    asm("mul.ftz.f16x2 %0, %1, %2;" : "=r"(f) : "r"(h), "r"(0x3c003c00u));
    return f;
  } else {
    const __half2 mag = __habs2(*reinterpret_cast<const __half2 *>(&h));
    const unsigned normal =
        __hge2_mask(mag, __half2(__ushort_as_half(0x0400), __ushort_as_half(0x0400)));
    return h & (normal | 0x80008000u);
  }
#endif
}

// sr_pair_fast_low<true, false, false> for random numbers r0, r1 that are already 13 bits (a
// kernel that keeps them across several conversions, the multi-token one): a = bits + r, one
// cvt.rz.f16x2.f32, the running NaN-propagating maximum of |h| and the flush of results below
// 2^-14 by a half-precision multiply with flush-to-zero; the same bits for the same inputs.
__device__ __forceinline__ uint32_t sr_pair_trunc_ftz(float v0, float v1, uint32_t r0,
                                                      uint32_t r1, uint32_t &hmax) {
#if MAMBA_SSU_HAS_CVT_RS
  (void)hmax;
  return sr_pair_hw(v0, v1, r0, r1);
#else
  const float a0 = __uint_as_float(__float_as_uint(v0) + r0);
  const float a1 = __uint_as_float(__float_as_uint(v1) + r1);
  uint32_t h;
  asm("cvt.rz.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(a1), "f"(a0));  // a1 -> upper half
  sr_hmax_abs(hmax, h);
  uint32_t f;
  asm("mul.ftz.f16x2 %0, %1, %2;" : "=r"(f) : "r"(h), "r"(0x3c003c00u));
  return f;
#endif
}

// Starting value of the running maximum: 0; 0x7C00 in both halves forces the exact path.
constexpr uint32_t kSrMaxInit = 0u;
constexpr uint32_t kSrMaxForceExact = 0x7c007c00u;

// Whether a chunk needs the exact path: a magnitude of at least 0x7BFF (hmax, whose halves
// carry xorsign signs in bit 15; with kHalfAcc a non-finite accumulator half), or a NaN state
// value (nan_probe, see nan_step).
template <bool kHalfAcc>
__device__ __forceinline__ bool sr_chunk_bad(uint32_t hmax, float nan_probe) {
  constexpr uint32_t kAdd = kHalfAcc ? 0x04000400u : 0x04010401u;
  return ((((hmax & 0x7fff7fffu) + kAdd) & 0x80008000u) != 0) || nan_probe != nan_probe;
}

// One step of the NaN probe over the rows' partial sums, which are NaN when one of the lane's
// new state values is: a NaN-propagating maximum, or with kHalfAcc an fp32 FMA p = y * 0 + p
// (also NaN for an infinite y: a false alarm).
template <bool kHalfAcc>
__device__ __forceinline__ float nan_step(float p, float y) {
  if constexpr (kHalfAcc) {
    return __fmaf_rn(y, 0.0f, p);
  } else {
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(p), "f"(y));
    return d;
  }
}

}  // namespace ssu
}  // namespace mamba_ssu
