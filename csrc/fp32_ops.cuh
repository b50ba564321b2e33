// fp32_ops.cuh — FlashInfer's fp32 operations, pinned: the approximate ex2 / lg2 / rcp
// instructions (ex2.approx.ftz.f32, lg2.approx.ftz.f32, rcp.approx.ftz.f32, what FlashInfer's
// -use_fast_math build executes), softplus and the z gate, each operation rounded explicitly
// (__fmul_rn, __fadd_rn) so that no compiler contraction changes a bit. Included by ssu.cuh
// (the single-token body); a second SSU kernel includes it for the same arithmetic.
#pragma once

namespace mamba_ssu {
namespace ssu {

constexpr float kL2E = 1.4426950408889634f; // log2(e)
constexpr float kLN2 = 0.6931471805599453f; // ln(2)

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float lg2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// dt' = log(1 + exp(dt')) the way FlashInfer computes it.
__device__ __forceinline__ float softplus(float v) {
  return __fmul_rn(lg2_approx(__fadd_rn(ex2_approx(__fmul_rn(v, kL2E)), 1.0f)), kLN2);
}

// y * (z * sigmoid(z)).
__device__ __forceinline__ float gate(float y, float z) {
  const float sig =
      rcp_approx(__fadd_rn(ex2_approx(__fmul_rn(__fsub_rn(0.0f, z), kL2E)), 1.0f));
  return __fmul_rn(y, __fmul_rn(z, sig));
}

}  // namespace ssu
}  // namespace mamba_ssu
