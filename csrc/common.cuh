// common.cuh — host-side helpers shared by the launchers (.cu files):
// error detail recording and CUDA error checking.
#pragma once

#include <cuda_runtime.h>

#include "include/mamba_ssu.h"

namespace mamba_ssu {

// Records a printf-style detail for mamba_ssu_last_error_detail() on this
// thread and returns `status`.
int fail(int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

// Clears this thread's error detail and discards a non-sticky CUDA runtime error left by an
// earlier call on the thread (every entry point calls it first).
void clear_error();

// Checks the launch that was just enqueued (cudaGetLastError) and maps a
// failure to MAMBA_SSU_ERROR_CUDA with the CUDA error text as detail.
int check_launch(const char *what);

// The seed_next pointer of the last selective-state-update launch this thread enqueued
// successfully (nullptr after a failed or seed_next-less one): how a fused chain knows that the
// call before it really stored its next link.
void note_ssu_launch(const int64_t *seed_next);
const int64_t *last_ssu_seed_next();

// Maps a CUDA runtime error to a status, recording its text.
int check_cuda(cudaError_t err, const char *what);

}  // namespace mamba_ssu
