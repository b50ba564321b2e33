// The recorder driver's queued timing (project code). Kept apart from firec.h, whose text is
// part of every group's build stamp: this function lives in libfirec.so alone, and adding it
// does not rebuild FlashInfer's groups.
#pragma once
#include <stdint.h>

#include "firec.h"

#ifdef __cplusplus
extern "C" {
#endif

// Times `iters` back-to-back calls of `entry` with the launch queue filled first: after
// `warmup` calls, a spin kernel of `spin_cycles` GPU clock cycles is launched, then the start
// event, the calls and the stop event, so that the calls run one after the other on the GPU
// while the host is still enqueueing them (what the GPU does, without the host's per-call
// cost). Writes the mean µs per call, the spin kernel's µs and the host's µs for enqueueing the
// calls: the timing is valid when host_us < spin_us (the queue did not drain).
int firec_time_queued(firec_entry entry, const firec_args* args, int warmup, int iters,
                      int64_t spin_cycles, double* us, double* spin_us, double* host_us, char* err,
                      int errlen);

// firec_time_queued with the state rotated over `copies` copies of it, `state_stride_bytes`
// apart from args->state on (call k, warm-up calls included, reads and writes copy k mod
// copies): with copies * state bytes well above the L2 size every call finds its state in
// HBM, as a decode step's layers do (each its own state), instead of in L2 where the previous
// call left it. copies = 1 is firec_time_queued.
int firec_time_queued_rotating(firec_entry entry, const firec_args* args, int copies,
                               int64_t state_stride_bytes, int warmup, int iters,
                               int64_t spin_cycles, double* us, double* spin_us, double* host_us,
                               char* err, int errlen);

#ifdef __cplusplus
}
#endif
