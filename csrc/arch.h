// arch.h — which instructions a device compilation pass may use, decided in one place from the
// pass's target (__CUDA_ARCH__ and the architecture-specific feature macros). Each feature has a
// form for every target the library is built for (build.rs: the architecture list), and the
// forms decide identically; docs/architecture.md lists them.
//
// MAMBA_SSU_SM80_PATHS (a compile-time test switch: -DMAMBA_SSU_SM80_PATHS through
// MAMBA_SSU_NVCC_FLAGS) selects the sm_80 form of every feature in every pass, so that a build
// for the H200 runs the code an A100 runs.
#pragma once

#if defined(__CUDA_ARCH__) && !defined(MAMBA_SSU_SM80_PATHS)
#define MAMBA_SSU_ARCH __CUDA_ARCH__
#else
#define MAMBA_SSU_ARCH 800
#endif

// cp.async.bulk.prefetch.L2 (sm_90+): one instruction prefetches a whole range into L2. A hint;
// the other targets skip it.
#if MAMBA_SSU_ARCH >= 900
#define MAMBA_SSU_HAS_BULK_PREFETCH 1
#else
#define MAMBA_SSU_HAS_BULK_PREFETCH 0
#endif

// max.NaN.xorsign.abs.f16x2 (sm_86+): the running maximum of |h| in one instruction. sm_80: the
// sign bits cleared, then max.NaN.f16x2 (the same magnitudes; a NaN gives a NaN either way).
#if MAMBA_SSU_ARCH >= 860
#define MAMBA_SSU_HAS_F16X2_XORSIGN_ABS 1
#else
#define MAMBA_SSU_HAS_F16X2_XORSIGN_ABS 0
#endif

// cvt.rs.f16x2.f32, the hardware stochastic-rounding conversion: only the architecture-specific
// targets sm_100a (B200, GB200) and sm_103a (B300, GB300); ptxas 13.0 rejects it for sm_100,
// sm_100f, sm_103f, sm_110a, sm_120a and sm_120f. FlashInfer converts with it on those targets
// (0.7.2 and 0.7.4 alike), so the kernels do too (sr.cuh); everywhere else the conversion is the
// software one of the call's rule.
#if defined(__CUDA_ARCH__) && !defined(MAMBA_SSU_SM80_PATHS) && \
    (defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL))
#define MAMBA_SSU_HAS_CVT_RS 1
#else
#define MAMBA_SSU_HAS_CVT_RS 0
#endif
