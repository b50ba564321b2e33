// common.cuh — host-side helpers shared by the launchers (.cu files):
// error detail recording and CUDA error checking.
#pragma once

#include <cuda_runtime.h>

// The library implements and converts its own deprecated entry points: no warnings for them.
#ifndef MAMBA_SSU_NO_DEPRECATION_WARNINGS
#define MAMBA_SSU_NO_DEPRECATION_WARNINGS
#endif
#include "include/mamba_ssu.h"

namespace mamba_ssu {

// Records a printf-style detail for mamba_ssu_last_error_detail() on this thread and returns
// `status`. The argument it names (mamba_ssu_last_error_argument()) is the known argument name
// the detail begins with, followed by ':' (status.cu lists them), else none.
int fail(int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

// Records the rejection of `argument` (a string literal: mamba_ssu_last_error_argument()
// returns it) with the detail "argument: " followed by the printf-style text, and returns
// `status`.
int reject(int status, const char *argument, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

// The argument the last error of this thread names ("" when none).
const char *last_argument();

// Makes the last error name `argument` (a string literal) instead, its detail prefixed with
// "argument: " (nothing changes when it names `argument` already).
void rename_argument(const char *argument);

// Clears this thread's error detail and argument and discards a non-sticky CUDA runtime error
// left by an earlier call on the thread (every entry point calls it first).
void clear_error();

// Checks the launch that was just enqueued (cudaGetLastError) and maps a
// failure to MAMBA_SSU_ERROR_CUDA with the CUDA error text as detail.
int check_launch(const char *what);

// Maps a CUDA runtime error to a status, recording its text.
int check_cuda(cudaError_t err, const char *what);

}  // namespace mamba_ssu
