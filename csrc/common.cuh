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

// Clears this thread's error detail.
void clear_error();

// Checks the launch that was just enqueued (cudaGetLastError) and maps a
// failure to MAMBA_SSU_ERROR_CUDA with the CUDA error text as detail.
int check_launch(const char *what);

// Maps a CUDA runtime error to a status, recording its text.
int check_cuda(cudaError_t err, const char *what);

}  // namespace mamba_ssu
