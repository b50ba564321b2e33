/*
 * mamba_ssu.h — the C ABI of mamba-ssu.
 *
 * Hand-written CUDA kernels for the Mamba-2 decode step:
 *   - a batched Philox seed draw: N seeds bit-identical to N consecutive
 *     `torch.randint(0, 2**32, (1,), device='cuda')` calls, in one launch;
 *   - a FlashInfer-compatible selective-state-update (SSU) kernel that reads
 *     its stochastic-rounding seed from device memory.
 *
 * Every launcher is asynchronous on the stream it is given, takes device
 * pointers, launches nothing when an argument is invalid, and returns a
 * mamba_ssu_status (0 = success). mamba_ssu_status_string() turns a code into
 * a message; mamba_ssu_last_error_detail() gives the detail of the last error
 * raised by this thread (e.g. the CUDA error text). A launch failure is reported only for this
 * call's own launch: every entry point first discards a non-sticky runtime error that an
 * earlier call on the thread left behind (cudaGetLastError), so such an error is neither
 * reported against a kernel that was in fact enqueued nor left for the caller afterwards.
 *
 * The stream type is the driver's CUstream (the runtime's cudaStream_t is the
 * same type); a NULL stream is the legacy default stream.
 *
 * Link: libmamba_ssu.a (built by `cargo build`, see README "C and C++"),
 * plus -lcudart_static (or -lcudart), -lstdc++, -ldl, -lpthread, -lrt.
 */
#ifndef MAMBA_SSU_H
#define MAMBA_SSU_H

#include <stddef.h>
#include <stdint.h>

/* Deprecated entry points, types and constants (each says what replaces it) carry these
 * attributes, so that C and C++ callers see a warning where they use one: MAMBA_SSU_DEPRECATED
 * before a function declaration, MAMBA_SSU_DEPRECATED_NAME after a typedef name or an
 * enumerator (GCC and Clang only). Define MAMBA_SSU_NO_DEPRECATION_WARNINGS before including
 * this header to silence them (the library's own build does). */
#if defined(MAMBA_SSU_NO_DEPRECATION_WARNINGS)
#define MAMBA_SSU_DEPRECATED(msg)
#define MAMBA_SSU_DEPRECATED_NAME(msg)
#elif defined(__GNUC__) || defined(__clang__)
#define MAMBA_SSU_DEPRECATED(msg) __attribute__((deprecated(msg)))
#define MAMBA_SSU_DEPRECATED_NAME(msg) __attribute__((deprecated(msg)))
#elif defined(_MSC_VER)
#define MAMBA_SSU_DEPRECATED(msg) __declspec(deprecated(msg))
#define MAMBA_SSU_DEPRECATED_NAME(msg)
#else
#define MAMBA_SSU_DEPRECATED(msg)
#define MAMBA_SSU_DEPRECATED_NAME(msg)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Same type as CUstream / cudaStream_t, declared without including cuda.h. */
typedef struct CUstream_st *mamba_ssu_stream_t;

/* Status codes returned by every launcher. */
typedef enum mamba_ssu_status {
  MAMBA_SSU_SUCCESS = 0,
  /* An argument is invalid (null pointer, size out of range, misaligned...). */
  MAMBA_SSU_ERROR_INVALID_ARGUMENT = 1,
  /* This combination of dtypes and sizes is not supported. */
  MAMBA_SSU_ERROR_UNSUPPORTED = 2,
  /* A CUDA runtime call or a kernel launch failed; see mamba_ssu_last_error_detail(). */
  MAMBA_SSU_ERROR_CUDA = 3,
  /* A prefetcher's forward scope was misused (e.g. a captured forward that consumed fewer
   * seeds than it drew); the streams are joined and usable. */
  MAMBA_SSU_ERROR_SCOPE = 4,
  /* An option's value is outside its set, or two options conflict (e.g. philox_rounds <= 0
   * with a seed, an intermediate buffer together with dst indices, an unknown algorithm): the
   * class of rejection FlashInfer's Python layer raises as ValueError. Shapes, dtypes, strides
   * and sizes that do not fit the contract are MAMBA_SSU_ERROR_INVALID_ARGUMENT (FlashInfer's
   * C++ checks: RuntimeError). */
  MAMBA_SSU_ERROR_INVALID_VALUE = 5
} mamba_ssu_status;

/* A static message for a status code (never NULL). */
const char *mamba_ssu_status_string(int status);

/* Detail of the last error raised on this thread by a launcher (never NULL;
 * "" when there was none). Valid until the next launcher call on this thread. */
const char *mamba_ssu_last_error_detail(void);

/* The argument the last error raised on this thread names ("state", "philox_rounds",
 * "seed.pointer", ...; "" when it names none): a string with static storage duration, valid
 * for the life of the process. The detail begins with the same name. */
const char *mamba_ssu_last_error_argument(void);

/* ------------------------------------------------------------------------ */
/* Seeds: torch-identical Philox draws                                       */
/* ------------------------------------------------------------------------ */

/* Most seeds one draw launch writes. */
#define MAMBA_SSU_MAX_SEEDS_PER_DRAW (1u << 24)

/* Device-resident generator state read by the graph-safe draws: what torch's
 * CUDA generator writes to device memory before every CUDA-graph replay. */
typedef struct mamba_ssu_generator_state {
  uint64_t seed;
  uint64_t offset; /* a multiple of 4 */
} mamba_ssu_generator_state;

/* Writes out[k] = value(seed, offset + 4k) for k < n: the k-th of n
 * consecutive torch.randint(0, 2**32, (1,)) draws from generator state
 * (seed, offset), as an int64 in [0, 2^32). One launch.
 * out: device pointer to n int64 values (8-byte aligned).
 * n: 1..MAMBA_SSU_MAX_SEEDS_PER_DRAW. offset: a multiple of 4. */
int mamba_ssu_draw_seeds(mamba_ssu_stream_t stream, int64_t *out, uint32_t n,
                         uint64_t seed, uint64_t offset);

/* Graph-safe form: reads (seed, offset) from device memory when the kernel
 * runs and draws from offset' = state->offset + intragraph_offset, so that a
 * launch captured in a CUDA graph draws fresh values on every replay after the
 * host rewrote *state. intragraph_offset: a multiple of 4 (fixed at capture). */
int mamba_ssu_draw_seeds_graphsafe(mamba_ssu_stream_t stream, int64_t *out,
                                   uint32_t n,
                                   const mamba_ssu_generator_state *state,
                                   uint64_t intragraph_offset);

/* Graph-safe form over a generator state kept as two separate device int64 values, as torch's
 * CUDA generator keeps it under CUDA-graph capture (at::PhiloxCudaState: seed_.ptr,
 * offset_.ptr, offset_intragraph_): reads *seed_ptr and *offset_ptr when the kernel runs and
 * draws from offset' = *offset_ptr + intragraph_offset. Both pointers 8-byte aligned;
 * intragraph_offset a multiple of 4. */
int mamba_ssu_draw_seeds_graphsafe_pair(mamba_ssu_stream_t stream, int64_t *out, uint32_t n,
                                        const int64_t *seed_ptr, const int64_t *offset_ptr,
                                        uint64_t intragraph_offset);

/* Counter seeds, TensorRT-LLM's form: an engine keeps one device int64 counter and, before every
 * stochastic-rounding layer, increments it by one (`rand_seed.add_(1)`) and passes it to the SSU
 * as rand_seed: one tiny kernel per layer. This launch does a forward's n of them at once:
 * out[k] = *counter + k + 1 for k < n, then *counter += n, with the int64 wrap-around of torch's
 * add_. The values and the final counter equal those of n consecutive stock increment-then-read
 * steps; layer k passes out + k as its rand_seed. The counter is read when the kernel runs (one
 * thread block), so a launch captured in a CUDA graph continues from the counter's value at each
 * replay. counter and out: device int64, 8-byte aligned, not overlapping; n:
 * 1..MAMBA_SSU_MAX_SEEDS_PER_DRAW. */
int mamba_ssu_counter_seeds(mamba_ssu_stream_t stream, int64_t *counter, int64_t *out,
                            uint32_t n);

/* Writes (seed, offset) into the device-resident state with a kernel whose
 * arguments carry the values (no host memory needs to outlive the call). */
int mamba_ssu_set_generator_state(mamba_ssu_stream_t stream,
                                  mamba_ssu_generator_state *state,
                                  uint64_t seed, uint64_t offset);

/* ------------------------------------------------------------------------ */
/* Selective state update (single token), FlashInfer 0.7.2 compatible       */
/* ------------------------------------------------------------------------ */

/* Element types. */
typedef enum mamba_ssu_dtype {
  MAMBA_SSU_F32 = 0,
  MAMBA_SSU_F16 = 1,
  MAMBA_SSU_BF16 = 2,
  MAMBA_SSU_I32 = 3,
  MAMBA_SSU_I64 = 4,
  /* int16: FlashInfer's block-scaled state (mamba_ssu_args.state_scale), only through
   * mamba_ssu_args. */
  MAMBA_SSU_I16 = 5
} mamba_ssu_dtype;

/* Which of FlashInfer's single-token kernels the results must match: it fixes the
 * per-element random bits of stochastic rounding, the summation order of the output and the
 * form of the state update. AUTO is FlashInfer's rule: below sm_90 SIMPLE; else SIMPLE when
 * batch * nheads < 2 * (number of SMs), or when the head dim is not one VERTICAL takes in
 * FlashInfer (a multiple of 16, at least 48; 0.7.4's rule); from there on VERTICAL on the
 * sm_90 family, and from sm_100 on VERTICAL for an F32 state and HORIZONTAL for an F16 or BF16
 * one whose head dim HORIZONTAL takes (else VERTICAL, FlashInfer 0.7.4's fallback). The
 * multi-token path has one layout (AUTO or SIMPLE). */
typedef enum mamba_ssu_algorithm {
  MAMBA_SSU_ALGO_AUTO = 0,
  MAMBA_SSU_ALGO_SIMPLE = 1,
  MAMBA_SSU_ALGO_VERTICAL = 2,
  /* FlashInfer's "horizontal" kernel: head dims that are a multiple of 64 up to 256 (others:
   * MAMBA_SSU_ERROR_INVALID_ARGUMENT, as FlashInfer 0.7.4's launcher refuses them), any state
   * dtype, not a block-scaled state. */
  MAMBA_SSU_ALGO_HORIZONTAL = 3
} mamba_ssu_algorithm;

/* Where the stochastic-rounding seed of a deprecated parameter block comes from.
 * Deprecated: use mamba_ssu_seed_mode (mamba_ssu_seed, mamba_ssu_args). */
typedef enum mamba_ssu_seed_source {
  /* rand_seed points to one int64 in device memory (FlashInfer's contract). */
  MAMBA_SSU_SEED_POINTER MAMBA_SSU_DEPRECATED_NAME("use MAMBA_SSU_SEED_MODE_POINTER") = 0,
  /* Fused: the kernel derives the seed itself as the stock torch draw from the
   * device generator state at offset (its offset) + seed_offset, i.e. Philox4x32-10
   * word 1 (see mamba_ssu_draw_seeds). The device state is either generator_state or the
   * pair (generator_seed_ptr, generator_offset_ptr). */
  MAMBA_SSU_SEED_FROM_GENERATOR MAMBA_SSU_DEPRECATED_NAME(
      "use MAMBA_SSU_SEED_MODE_DERIVED with a device position") = 1,
  /* Fused, eager: the kernel derives the seed as the stock torch draw from the values
   * (generator_seed, seed_offset) passed in the parameters (no device memory read). */
  MAMBA_SSU_SEED_FROM_VALUES MAMBA_SSU_DEPRECATED_NAME(
      "use MAMBA_SSU_SEED_MODE_DERIVED with a position by value") = 2
} mamba_ssu_seed_source MAMBA_SSU_DEPRECATED_NAME("use mamba_ssu_seed_mode");

/* The fp32 -> fp16 conversion of stochastic rounding (the random bits are the same in both).
 * V072: FlashInfer 0.7.2's (add 13 random bits to the fp32 magnitude and truncate; results
 * below 2^-14 flush to zero, an Inf input becomes NaN whenever the bits are not 0).
 * V074: FlashInfer 0.7.4's (Inf stays Inf, NaN stays NaN, a finite value that rounds past
 * 65504 saturates to Inf, values below 2^-14 round stochastically onto fp16 subnormals). The
 * two agree for every finite |x| >= 2^-14 whose result is finite. */
typedef enum mamba_ssu_sr_rule {
  MAMBA_SSU_SR_V072 = 0,
  MAMBA_SSU_SR_V074 = 1
} mamba_ssu_sr_rule;

/* Arguments of one selective-state-update call. All strides are in elements.
 *
 * Deprecated: use mamba_ssu_args with mamba_ssu_check / mamba_ssu_launch / mamba_ssu_plan (the
 * tensors as descriptors, the seed as a mamba_ssu_seed). The entry points below keep working:
 * they convert the flat seed fields into a mamba_ssu_seed once, at entry (philox_rounds 0: no
 * seed; POINTER: rand_seed; FROM_GENERATOR and FROM_VALUES: derived in the kernel), and run
 * the same checks and kernels. A FROM_VALUES seed's position is (generator_seed, seed_offset),
 * also for seed_next (a generator state given with it is not read); every other seed_next
 * takes the device generator state when one is given, as documented below.
 *
 * Shapes (FlashInfer's):
 *   state (cache_slots, nheads, dim, dstate): inner three dims contiguous,
 *         slot stride state_stride_batch (>= nheads*dim*dstate).
 *   x, z, out (batch, nheads, dim): [b*stride_batch + h*dim + d].
 *   dt (batch, nheads, dim) with strides (dt_stride_batch, 1, 0): one value
 *         per (batch, head): dt[b*dt_stride_batch + h].
 *   A (nheads, dim, dstate), strides (1, 0, 0), fp32: A[h].
 *   D, dt_bias (nheads, dim), strides (1, 0): D[h], dt_bias[h].
 *   B, C (batch, ngroups, dstate): [b*stride_batch + g*dstate + n].
 *   state_batch_indices / dst_state_batch_indices (batch,) or (batch, T):
 *         element [b*stride] (column 0).
 * dstate: a multiple of 32 from 64 to 512 (96, 160, 192 and 224 on the run-time kernels of
 *   every algorithm; an I16 state there too, but VERTICAL at 96, 160 and 224 is UNSUPPORTED:
 *   FlashInfer's vertical kernel writes -32767 into part of the row); with an F32 state also a
 *   multiple of 16 from 32 to 512 but 112 (run-time kernels). Above 256: VERTICAL, and AUTO
 *   where it resolves to VERTICAL, is INVALID_ARGUMENT (FlashInfer's launcher refuses it); an
 *   I16 state is UNSUPPORTED. Any other dstate FlashInfer's sm_90 module takes
 *   is UNSUPPORTED, the rest INVALID_ARGUMENT. The multi-token block takes the same.
 * Optional pointers (z, D, dt_bias, the index tensors) may be NULL.
 * Speed: F16 state with BF16 inputs and weights, dstate 64, 128 or 256 and 0, 5 or 10 Philox
 * rounds run compiled-in kernels (dim 64 with dstate 128 the tuned ones; with the head dim read
 * at run time every multiple of 16 up to 256, e.g. Nemotron Nano 2's 80, and 128; dstate 64 and
 * 256 with the head dim at run time), each built with and without z
 * (z == NULL runs a loop with no z work); a BF16, F32 or I16 state without SR likewise (the
 * same kernels with the state converted from and to bf16, held in fp32, or int16 dequantised
 * with the read slot's scales and quantised per row); also FP16 inputs and weights over an
 * F16 state, and over a BF16 or F32 state without SR (unless the library was built with
 * MAMBA_SSU_F16_INPUT_KERNELS=0); every other combination
 * a kernel that takes them at run time. ALGO_HORIZONTAL: BF16 inputs and weights run kernels
 * with them compiled in (an F16 state with 0, 5 or 10 rounds, a BF16 or F32 state), and FP16
 * ones likewise (but in a library built with MAMBA_SSU_F16_INPUT_KERNELS=0); everything else a kernel
 * per state dtype that reads them at run time; the head dim and dstate are run-time values in
 * all. */
typedef struct mamba_ssu_params {
  int64_t batch;
  int64_t nheads;
  int64_t dim;
  int64_t dstate;
  int64_t ngroups;
  int64_t state_cache_size; /* state.size(0): number of slots */

  int64_t state_stride_batch;
  int64_t x_stride_batch;
  int64_t dt_stride_batch;
  int64_t B_stride_batch;
  int64_t C_stride_batch;
  int64_t z_stride_batch;
  int64_t out_stride_batch;
  int64_t state_batch_indices_stride;
  int64_t dst_state_batch_indices_stride;

  /* A slot index equal to pad_slot_id marks a padded entry: state read as 0,
   * out written, state untouched. */
  int64_t pad_slot_id;

  void *state;
  const void *x;
  const void *dt;
  const void *dt_bias; /* optional */
  const float *A;
  const void *B;
  const void *C;
  const void *D; /* optional */
  const void *z; /* optional */
  void *out;
  const void *state_batch_indices;     /* optional */
  const void *dst_state_batch_indices; /* optional */

  /* Seed: see mamba_ssu_seed_source. */
  const int64_t *rand_seed;
  const mamba_ssu_generator_state *generator_state;
  uint64_t seed_offset;    /* FROM_GENERATOR: added to generator_state->offset;
                              FROM_VALUES: the draw's offset (a multiple of 4) */
  uint64_t generator_seed; /* FROM_VALUES: the generator's seed */

  int32_t state_dtype;  /* F16, BF16 or F32 */
  int32_t input_dtype;  /* x, z, B, C, out: F16, BF16 or F32 */
  int32_t weight_dtype; /* dt, D, dt_bias: F16, BF16 or F32 */
  int32_t index_dtype;  /* I32 or I64 */
  int32_t dt_softplus;  /* bool */
  int32_t update_state; /* bool: 0 leaves the state untouched */
  int32_t philox_rounds; /* 0 = round to nearest; >= 1 = stochastic rounding
                            of an F16 state with that many Philox rounds */
  int32_t algorithm;     /* mamba_ssu_algorithm */
  int32_t seed_source;   /* mamba_ssu_seed_source */
  int32_t num_sms;       /* for ALGO_AUTO; <= 0: query the current device */

  /* Optional (NULL: off), with any seed_source: one extra thread block of the kernel also
   * stores here the stock draw that FOLLOWS this call's draw position, i.e. the seed of the
   * next call of a fused chain (mamba_ssu_prefetcher_begin_fused_forward), which reads it as
   * its rand_seed. This call's position: the device generator state when one is given
   * (generator_state, or the pair below: its seed, its offset + seed_offset), else
   * (generator_seed, seed_offset); the stored value is the torch draw at that offset + 4.
   * 8-byte aligned; seed_offset a multiple of 4. */
  int64_t *seed_next;

  /* Optional (both NULL: off): the device generator state as two separate int64 values, the
   * form torch's CUDA generator uses under CUDA-graph capture (at::PhiloxCudaState's seed_.ptr
   * and offset_.ptr; pass its offset_intragraph_ as seed_offset). Read when the kernel runs,
   * like generator_state, for which it is an alternative: give both pointers or neither, and
   * not together with generator_state. 8-byte aligned. */
  const int64_t *generator_seed_ptr;
  const int64_t *generator_offset_ptr;

  /* With stochastic rounding: which release's fp32 -> fp16 conversion the state gets
   * (mamba_ssu_sr_rule; 0 = FlashInfer 0.7.2's, what engines pin; any other value than 0 or 1
   * is rejected, with or without SR). MAMBA_SSU_SR_V074 with SR runs the generic kernel, also
   * for the hot shapes (mamba_ssu_launch_plan.compiled_kernel 0), which is slower. */
  int32_t sr_rule;
} mamba_ssu_params MAMBA_SSU_DEPRECATED_NAME("use mamba_ssu_args");

/* Checks *params against the kernel's contract (the same checks the launcher
 * makes) without launching anything. Deprecated: use mamba_ssu_check. */
MAMBA_SSU_DEPRECATED("use mamba_ssu_check")
int mamba_ssu_selective_state_update_check(const struct mamba_ssu_params *params);

/* Enqueues one selective-state-update on stream. Deprecated: use mamba_ssu_launch. */
MAMBA_SSU_DEPRECATED("use mamba_ssu_launch")
int mamba_ssu_selective_state_update(mamba_ssu_stream_t stream,
                                     const struct mamba_ssu_params *params);

/* The launch configuration mamba_ssu_selective_state_update would use for *params (a pure
 * function of the parameters and the SM count: no device is touched when num_sms > 0). */
typedef struct mamba_ssu_launch_plan {
  int64_t grid_blocks;       /* thread blocks (a fused chain's extra block included) */
  int64_t blocks_per_head;   /* blocks serving one (batch, head) */
  int32_t threads_per_block;
  int32_t warps_per_block;
  int32_t rows_per_warp;     /* state rows (dim) one warp serves */
  int32_t algorithm;         /* the resolved layout: SIMPLE, VERTICAL or HORIZONTAL */
  int32_t compiled_kernel;   /* 1: a compiled-in (hot) kernel, 0: the run-time one */
  int32_t num_sms;           /* the SM count the plan is for */
} mamba_ssu_launch_plan;

/* Checks *params like the launcher and fills *out with its launch configuration for a device
 * of num_sms multiprocessors (num_sms <= 0: the current device's count is queried). Nothing is
 * launched. Deprecated: use mamba_ssu_plan. */
MAMBA_SSU_DEPRECATED("use mamba_ssu_plan")
int mamba_ssu_selective_state_update_plan(const struct mamba_ssu_params *params, int32_t num_sms,
                                          mamba_ssu_launch_plan *out);

/* The algorithm ALGO_AUTO resolves to for batch*nheads on an sm_90-family device with num_sms
 * multiprocessors, or (num_sms <= 0) on the current device, whose compute capability counts
 * too (below 9: SIMPLE), for an F32 state (SIMPLE or VERTICAL: FlashInfer's rule sends an F32
 * state to HORIZONTAL on no GPU; mamba_ssu_resolve_algorithm_for_state takes the state dtype and
 * head dim). SIMPLE, VERTICAL and HORIZONTAL resolve to themselves.
 * Failure: minus the status (a value outside the enumeration: MAMBA_SSU_ERROR_INVALID_VALUE; a
 * failed device query: MAMBA_SSU_ERROR_CUDA). */
int mamba_ssu_resolve_algorithm(int32_t algorithm, int64_t batch,
                                int64_t nheads, int32_t num_sms);

/* ------------------------------------------------------------------------ */
/* Selective state update over T tokens per sequence (speculative-decoding   */
/* verify), FlashInfer 0.7.2 compatible                                      */
/* ------------------------------------------------------------------------ */

/* Most tokens per sequence of one multi-token call (ntokens). */
#define MAMBA_SSU_MTP_MAX_TOKENS 16

/* Arguments of one multi-token selective-state-update call: T tokens of each of `batch`
 * sequences, the state read once per sequence, carried in fp32 across its tokens and written
 * per token. All strides are in elements.
 *
 * Deprecated: use mamba_ssu_args with mamba_ssu_check / mamba_ssu_launch / mamba_ssu_plan. The
 * entry points below keep working; their seed fields are converted as mamba_ssu_params' are.
 *
 * Sequences. Fixed length (cu_seqlens == NULL): sequence b is the ntokens tokens t of
 *   x (batch, ntokens, nheads, dim) at [b*x_stride_batch + t*x_stride_token + h*dim + d].
 * Varlen (cu_seqlens != NULL, batch + 1 offsets): sequence b is the token rows
 *   r = cu_seqlens[b] .. cu_seqlens[b+1]-1 of x (total_tokens, nheads, dim) at
 *   [r*x_stride_token + h*dim + d]; the *_stride_batch fields are not read; ntokens is the
 *   most tokens a sequence may have (FlashInfer's cache_steps / max_seqlen): tokens of a
 *   longer sequence past ntokens are not computed (their out rows are left as they were).
 *   The offsets live in device memory: non-decreasing values in 0..=total_tokens are the
 *   caller's contract (a sequence whose offsets are not is skipped: nothing read or written).
 * z, out: as x (own strides). dt: as x with strides (.., .., 1, 0): dt[b, t, h] at
 *   [b*dt_stride_batch + t*dt_stride_token + h]. B, C: (.., ngroups, dstate) at
 *   [.. + g*dstate + n]. A, D, dt_bias: per head, as single token.
 * state (state_cache_size, nheads, dim, dstate): inner three dims contiguous.
 * Alignment: state, intermediate_states, B, C 16 bytes, and the B/C batch and token strides
 *   multiples of 16 bytes; x, z, out their element size; dt, D, dt_bias the weight size; A 4;
 *   the index tensors the index size. Every stride >= 0; state_stride_batch >=
 *   nheads*dim*dstate. Every tensor's byte extent <= 2^60; batch * nheads *
 *   max(4, ceil(dim / 64)) (+ 1 with seed_next) <= INT32_MAX.
 * out rows (nheads*dim elements each) must not overlap. Fixed length: when ntokens > 1,
 *   out_stride_token >= nheads*dim; when batch > 1, out_stride_batch >= ntokens *
 *   out_stride_token if ntokens > 1, else >= nheads*dim. Varlen: when total_tokens > 1,
 *   out_stride_token >= nheads*dim.
 *
 * Read slot of sequence b: a 1-D state_batch_indices (cols 0): [b*stride]; a 2-D one:
 *   [b*stride + k*stride_col] with k = max(num_accepted_tokens[b] - 1, 0) when
 *   num_accepted_tokens is given, else k = 0; b without indices. A read slot equal to
 *   pad_slot_id, or outside 0..state_cache_size, or a column k >= cols, makes the sequence
 *   a pad: zero initial state, out computed for every token, nothing written.
 * Write modes, exclusive:
 *   intermediate_states (entries, cache_steps, nheads, dim, dstate), contiguous, state dtype:
 *     token t of sequence b goes to entry e, step t, e = intermediate_state_indices[b] (or
 *     the read slot without that tensor); an entry outside 0..intermediate_cache_size is
 *     not written (one equal to pad_slot_id inside it is, as FlashInfer writes it); the
 *     state itself is never written;
 *   dst_state_batch_indices (batch, cols) 2-D, cols >= ntokens: token t goes to slot dst[b, t] unless it is
 *     pad_slot_id or outside 0..state_cache_size (in-place verify: pass the read index here
 *     as well);
 *   neither: the sequence's last token goes to the read slot when update_state is set.
 * intermediate_states with dst_state_batch_indices is invalid (two write modes: status
 * MAMBA_SSU_ERROR_INVALID_VALUE), so is
 * intermediate_state_indices without intermediate_states; with intermediate_states,
 * cache_steps >= ntokens and intermediate_cache_size >= 1.
 * A zero-length sequence writes nothing. out uses the fp32 state before any rounding.
 * Index tensors: state_batch_indices, dst_state_batch_indices and intermediate_state_indices
 * have index_dtype; num_accepted_tokens and cu_seqlens their own (num_accepted_tokens_dtype,
 * cu_seqlens_dtype; 0: index_dtype).
 * Stochastic rounding: Philox once per state element per call (the token is not in the
 * counter, as FlashInfer's; see docs/flashinfer-ssu.md of the crate for the mapping).
 * Speed: F16 state, BF16 inputs and weights, dstate 64, 128 or 256 and 0, 5 or 10 Philox
 * rounds run compiled-in kernels (any head dim; dstate 128 the tuned ones), and a BF16 or I16
 * state likewise without SR, when num_accepted_tokens and cu_seqlens have index_dtype (also
 * FP16 inputs and weights over an F16 state, and over a BF16 state without SR, but in a library
 * built with MAMBA_SSU_F16_INPUT_KERNELS=0); every other combination a kernel that takes them
 * at run time. */
typedef struct mamba_ssu_mtp_params {
  int64_t batch;   /* sequences: >= 1 */
  int64_t ntokens; /* 1..MAMBA_SSU_MTP_MAX_TOKENS: T (fixed length) or the longest (varlen) */
  int64_t total_tokens; /* varlen: token rows of x (>= 0); fixed length: not read */
  int64_t nheads;
  int64_t dim;
  int64_t dstate;
  int64_t ngroups;
  int64_t state_cache_size; /* state.size(0) */
  int64_t cache_steps;      /* intermediate_states: steps per entry, >= ntokens */
  int64_t intermediate_cache_size; /* intermediate_states: entries */

  int64_t state_stride_batch;
  int64_t x_stride_batch, x_stride_token;
  int64_t dt_stride_batch, dt_stride_token;
  int64_t B_stride_batch, B_stride_token;
  int64_t C_stride_batch, C_stride_token;
  int64_t z_stride_batch, z_stride_token;
  int64_t out_stride_batch, out_stride_token;
  /* 2-D index tensors: cols = size(1) (0 for a 1-D state_batch_indices; dst must be 2-D) */
  int64_t state_batch_indices_stride, state_batch_indices_stride_col, state_batch_indices_cols;
  int64_t dst_state_batch_indices_stride, dst_state_batch_indices_stride_col,
      dst_state_batch_indices_cols;
  int64_t num_accepted_tokens_stride;
  int64_t cu_seqlens_stride;
  int64_t intermediate_state_indices_stride;

  int64_t pad_slot_id;

  void *state;
  const void *x;
  const void *dt;
  const void *dt_bias; /* optional */
  const float *A;
  const void *B;
  const void *C;
  const void *D; /* optional */
  const void *z; /* optional */
  void *out;
  const void *state_batch_indices;        /* optional */
  const void *dst_state_batch_indices;    /* optional */
  const void *num_accepted_tokens;        /* optional */
  const void *cu_seqlens;                 /* optional: varlen */
  void *intermediate_states;              /* optional */
  const void *intermediate_state_indices; /* optional, needs intermediate_states */

  /* Seed: exactly as mamba_ssu_params (mamba_ssu_seed_source; seed_next for a fused chain). */
  const int64_t *rand_seed;
  const mamba_ssu_generator_state *generator_state;
  const int64_t *generator_seed_ptr;
  const int64_t *generator_offset_ptr;
  uint64_t seed_offset;
  uint64_t generator_seed;
  int64_t *seed_next;

  int32_t state_dtype;   /* F16, BF16 or F32 (also intermediate_states) */
  int32_t input_dtype;   /* x, z, B, C, out */
  int32_t weight_dtype;  /* dt, D, dt_bias */
  int32_t index_dtype;   /* I32 or I64: every index tensor */
  int32_t dt_softplus;   /* bool */
  int32_t update_state;  /* bool: 0 = disable_state_update (matters without a write tensor) */
  int32_t philox_rounds; /* 0 = round to nearest; >= 1: SR of an F16 state */
  int32_t sr_rule;       /* mamba_ssu_sr_rule */
  int32_t seed_source;   /* mamba_ssu_seed_source */
  int32_t num_sms;       /* <= 0: query the current device (grid sizing only) */
  /* The dtypes of num_accepted_tokens and cu_seqlens, which FlashInfer takes independently of
   * the slot indices': I32 or I64, or 0 (what a zeroed block holds; MAMBA_SSU_F32 is no index
   * dtype): index_dtype. A dtype other than index_dtype runs the run-time kernel
   * (mamba_ssu_launch_plan.compiled_kernel 0). */
  int32_t num_accepted_tokens_dtype;
  int32_t cu_seqlens_dtype;
} mamba_ssu_mtp_params MAMBA_SSU_DEPRECATED_NAME("use mamba_ssu_args");

/* Checks *params against the multi-token kernel's contract without launching anything.
 * Deprecated: use mamba_ssu_check. */
MAMBA_SSU_DEPRECATED("use mamba_ssu_check")
int mamba_ssu_selective_state_update_mtp_check(const struct mamba_ssu_mtp_params *params);

/* Enqueues one multi-token selective-state-update on stream. Deprecated: use
 * mamba_ssu_launch. */
MAMBA_SSU_DEPRECATED("use mamba_ssu_launch")
int mamba_ssu_selective_state_update_mtp(mamba_ssu_stream_t stream,
                                         const struct mamba_ssu_mtp_params *params);

/* The multi-token launch configuration for *params on a device of num_sms multiprocessors
 * (<= 0: the current device's), checked like the launcher; nothing is launched. Fields as
 * mamba_ssu_launch_plan (algorithm: SIMPLE, the only multi-token layout). Deprecated: use
 * mamba_ssu_plan. */
MAMBA_SSU_DEPRECATED("use mamba_ssu_plan")
int mamba_ssu_selective_state_update_mtp_plan(const struct mamba_ssu_mtp_params *params,
                                              int32_t num_sms, mamba_ssu_launch_plan *out);

/* ------------------------------------------------------------------------ */
/* Seed prefetcher: a forward's N seeds in one launch on a side stream       */
/* ------------------------------------------------------------------------ */

/* Opaque prefetcher: one per device. Not thread-safe: drive it from one thread. */
typedef struct mamba_ssu_prefetcher mamba_ssu_prefetcher;

/* When the batched draw of a forward is issued. */
typedef enum mamba_ssu_prefetch_point {
  /* At begin_forward: the draw overlaps the main stream's work before the first SSU. */
  MAMBA_SSU_PREFETCH_AT_BEGIN = 0,
  /* At the first seed request of the forward. */
  MAMBA_SSU_PREFETCH_AT_FIRST_CALL = 1
} mamba_ssu_prefetch_point;

/* How a captured forward's batched draw enters the CUDA graph (eager forwards always use the
 * side stream and events). */
typedef enum mamba_ssu_capture_layout {
  /* As eagerly: the draw on the side stream, joined into main by events, which in the graph
   * become a parallel branch and its join edge. */
  MAMBA_SSU_CAPTURE_BRANCH = 0,
  /* The default: the draw as one node on main at the fork point (no branch, no events): one
   * kernel boundary on the critical path instead of a branch join, which measured cheaper on
   * the H200 (BENCHMARKS.md, decode step). */
  MAMBA_SSU_CAPTURE_INLINE = 1
} mamba_ssu_capture_layout;

/* What a forward did, filled by end_forward. */
typedef struct mamba_ssu_forward_summary {
  uint32_t requested;  /* seed requests in the forward */
  uint32_t prefetched; /* served from the batched draw */
  uint32_t fallback;   /* served by an inline stock draw */
  uint32_t drawn;      /* seeds drawn by the batched launch (0 or N) */
  int32_t captured;    /* whether the forward was captured in a CUDA graph */
} mamba_ssu_forward_summary;

/* Every prefetcher call makes the prefetcher's device current for its own work and restores
 * the caller's current device before it returns.
 *
 * Creates a prefetcher on the current CUDA device for forwards of seeds_per_forward
 * (N >= 1) stochastic-rounding layers: allocates its side stream (non-blocking), events and
 * device buffers. *out receives the handle. */
int mamba_ssu_prefetcher_create(mamba_ssu_prefetcher **out, uint32_t seeds_per_forward,
                                int32_t prefetch_point);

/* Chooses how captured forwards place their batched draw (mamba_ssu_capture_layout; the
 * default after create is MAMBA_SSU_CAPTURE_INLINE). Not allowed while a forward is open
 * (MAMBA_SSU_ERROR_SCOPE). */
int mamba_ssu_prefetcher_set_capture_layout(mamba_ssu_prefetcher *p, int32_t layout);

/* Destroys the prefetcher (synchronizes its side stream first). NULL is a no-op. A prefetcher
 * that was ever used under CUDA-graph capture keeps its device buffers allocated for the rest
 * of the process (a few hundred bytes): a graph captured with it stays safe to replay after
 * destroy (it then draws from the state last written by prepare_replay). */
int mamba_ssu_prefetcher_destroy(mamba_ssu_prefetcher *p);

/* Begins a forward on main: every seed of this forward must be requested on main.
 * generator: the host generator state (torch's (seed, offset)), read here and advanced by
 * mamba_ssu_prefetcher_seed in call order, 4 per seed, exactly as stock draws would; while
 * main is being captured the host state is not advanced (the draws read the device state
 * written by mamba_ssu_prefetcher_prepare_replay, as torch's RNG does under capture). */
int mamba_ssu_prefetcher_begin_forward(mamba_ssu_prefetcher *p, mamba_ssu_stream_t main,
                                       mamba_ssu_generator_state *generator);

/* The seed of the next stochastic-rounding layer (layer = its index in the forward, which must
 * equal the number of seeds requested so far in this forward): *seed_out receives a device
 * pointer to one int64 that holds the stock draw for this call, readable by work enqueued on
 * `stream` after this call (FlashInfer's rand_seed). Inside a forward, layers < N are served
 * from the batched draw (main waits once on its event); other calls (layers >= N, calls with no
 * forward, or a generator moved by someone else) draw the stock seed inline on `stream`.
 * The pointer stays valid until 64 further inline draws or the next forward's batched draw
 * has been enqueued, whichever comes first: consume it on `stream` before then. Inside a fused
 * forward (begin_fused_forward) this call is a scope error: request fused seeds there. */
int mamba_ssu_prefetcher_seed(mamba_ssu_prefetcher *p, mamba_ssu_stream_t stream,
                              mamba_ssu_generator_state *generator, uint32_t layer,
                              const int64_t **seed_out);

/* Begins a FUSED forward on main: no batched draw; mamba_ssu_prefetcher_derive_seed (or
 * derive_seed_at) then chains the forward's first N requests: request 0 derives its seed in the
 * kernel and every request k < N-1 also makes its call store the seed of request k+1 from one
 * extra thread block (seed->next), which request k+1 reads as a pointer
 * (MAMBA_SSU_SEED_MODE_POINTER). The 10 Philox rounds of the seed derivation then run once per
 * forward on the critical path instead of once per layer. Values are the stock sequence;
 * requests beyond N, or after the generator was moved by someone else, derive their own seed.
 * Contract: every fused seed requested in the forward is consumed by exactly one
 * mamba_ssu_launch on main before the next request (the chain's next link is written by that
 * launch, which tells the prefetcher named in seed->chain that it was enqueued); a request
 * whose predecessor's link was handed out but whose launch was never confirmed returns
 * MAMBA_SSU_ERROR_SCOPE instead of a stale link (nothing drawn; requesting again derives the
 * seed). end_forward closes it; the summary counts chained requests as `prefetched` and
 * self-deriving ones as `fallback`. The links live in the prefetcher's own buffer (see
 * mamba_ssu_prefetcher_begin_fused_forward_links for a caller's buffer). */
int mamba_ssu_prefetcher_begin_fused_forward(mamba_ssu_prefetcher *p, mamba_ssu_stream_t main,
                                             mamba_ssu_generator_state *generator);

/* The fused path for a deprecated parameter block: fills params->seed_source and its fields so
 * that the SSU kernel derives the stock seed of this call itself (no seed kernel at all), and
 * advances the generator like one stock draw. Eagerly the seed and offset are passed by value
 * (MAMBA_SSU_SEED_FROM_VALUES); while `stream` is captured the kernel reads the prefetcher's
 * device generator state plus the intragraph offset (MAMBA_SSU_SEED_FROM_GENERATOR), so replays
 * draw fresh seeds after mamba_ssu_prefetcher_prepare_replay. It never chains: every call
 * derives its own seed (the same values a chained forward gives), also inside a fused forward,
 * where it counts as a self-deriving request (`fallback`) and the chain restarts at the next
 * request; inside a prefetching forward it is an error (MAMBA_SSU_ERROR_SCOPE).
 * Deprecated: use mamba_ssu_prefetcher_derive_seed (a mamba_ssu_seed, chained in a fused
 * forward when consumed by mamba_ssu_launch). */
MAMBA_SSU_DEPRECATED("use mamba_ssu_prefetcher_derive_seed")
int mamba_ssu_prefetcher_fused_seed(mamba_ssu_prefetcher *p, mamba_ssu_stream_t stream,
                                    mamba_ssu_generator_state *generator,
                                    struct mamba_ssu_params *params);

/* Ends the forward begun on main (by begin_forward or begin_fused_forward) and fills *summary
 * (may be NULL). The side stream is always joined into main. Returns MAMBA_SSU_ERROR_SCOPE when
 * no forward is open, or when a captured prefetching forward drew seeds it did not consume (the
 * graph would advance the generator unlike stock); eagerly that case is allowed. A fused
 * forward draws nothing ahead, so it may end after any number of requests. */
int mamba_ssu_prefetcher_end_forward(mamba_ssu_prefetcher *p,
                                     mamba_ssu_forward_summary *summary);

/* The total offset increment (4 per seed) recorded by the most recent CUDA-graph capture that
 * used this prefetcher: what one replay of that graph advances the generator by. */
int mamba_ssu_prefetcher_graph_increment(const mamba_ssu_prefetcher *p, uint64_t *increment);

/* Before each replay of a captured graph: writes the host generator's (seed, offset) to the
 * device state on stream (a kernel) and advances the host offset by graph_increment. */
int mamba_ssu_prefetcher_prepare_replay(mamba_ssu_prefetcher *p, mamba_ssu_stream_t stream,
                                        mamba_ssu_generator_state *generator,
                                        uint64_t graph_increment);

/* ------------------------------------------------------------------------ */
/* The SSU call: FlashInfer's arguments as tensors, one contract            */
/* ------------------------------------------------------------------------ */
/*
 * mamba_ssu_check / mamba_ssu_launch / mamba_ssu_plan take one call in FlashInfer's terms: the
 * tensors as the caller holds them (pointer, dtype, shape, strides) and FlashInfer's options.
 * The check is the ONE place where every argument rule of the crate is written: the Rust API,
 * the torch extension and C callers all fill a mamba_ssu_args and let it decide. What only a
 * front door can see stays there: buffer lengths (Rust), devices and lifetimes (Rust, torch).
 *
 * Forms (FlashInfer 0.7.2's Python rule, form = MAMBA_SSU_FORM_AUTO): cu_seqlens given with a
 * rank-3 x is the varlen multi-token form; else a rank-4 x, or cache_steps >= 1, is the
 * fixed-length multi-token form; anything else is the single-token form. FORM_SINGLE and
 * FORM_MULTI ask for one form and reject a call whose tensors select the other.
 *
 * Ranks (FlashInfer's normalisation, applied by the check): a rank-3 state (slots, dim,
 * dstate) has one head; a rank-2 A, a rank-1 D / dt_bias likewise; a rank-2 x, dt, B, C, z,
 * out has one head (single token) and, with cache_steps >= 1 outside the varlen form, a rank-3
 * one has one token per sequence. The canonical shapes after that:
 *   single token: state (slots, nheads, dim, dstate); x, z, out (batch, nheads, dim);
 *     dt (batch, nheads, dim) strides (any, 1, 0); A (nheads, dim, dstate) F32 strides
 *     (1, 0, 0); B, C (batch, ngroups, dstate); D, dt_bias (nheads, dim) strides (1, 0);
 *     state_batch_indices, dst_state_batch_indices (batch,) or (batch, cols) (column 0).
 *   multi token: x, z, out (batch, T, nheads, dim) or varlen (total_tokens, nheads, dim);
 *     dt likewise with strides (.., .., 1, 0); B, C (batch, T, ngroups, dstate) or
 *     (total_tokens, ngroups, dstate); cu_seqlens (batch + 1,); intermediate_states
 *     (entries, cache_steps, nheads, dim, dstate); intermediate_state_indices (batch,);
 *     num_accepted_tokens (>= batch,); state_batch_indices, dst_state_batch_indices
 *     (>= batch,) or (>= batch, cols >= T) (T: cache_steps in the varlen form). A 1-D dst
 *     index sends every token of sequence b to slot dst[b]; num_accepted_tokens with a 1-D
 *     read index reads state_batch_indices[b].
 * Index tensors longer than the batch (and a 2-D one wider than T) are FlashInfer's padded
 * tensors: only the first rows and columns are read.
 * A stride of a dimension of size 1 is never read (torch leaves it arbitrary). The kernels'
 * semantics (slots, pads, write modes, stochastic rounding) are those documented for
 * mamba_ssu_params and mamba_ssu_mtp_params above; crate/README docs list the served
 * dtypes and sizes.
 *
 * Rules besides the shapes (a violation is MAMBA_SSU_ERROR_INVALID_ARGUMENT unless noted).
 * FlashInfer's classes: what its Python layer checks is INVALID_VALUE (its ValueError), checked
 * first, before any tensor rule, in its order: a seed with a state_scale; the seed's values
 * (mode, rule, reserved, rounds >= 1 with a seed); intermediate_states with
 * dst_state_batch_indices (whatever the form); an algorithm outside the enumeration; then the
 * crate's form option. What its C++ layer checks (shapes, dtypes, sizes) is INVALID_ARGUMENT
 * (its RuntimeError).
 *   dtypes: x, z, out, B, C x's float dtype; dt, D, dt_bias dt's; A F32; state a float dtype
 *     and intermediate_states the state's. Index tensors I32 or I64: the slot indices' dtype
 *     is state_batch_indices' (else dst_state_batch_indices', else intermediate_state_indices');
 *     dst_state_batch_indices has state_batch_indices' dtype, and so has
 *     intermediate_state_indices when both are given; num_accepted_tokens and cu_seqlens each
 *     have their own (FlashInfer compiles them independently).
 *     state I16: FlashInfer's int16 state, with or without state_scale (an int16
 *     intermediate_states_buffer with it); a state_scale with a float state, decode scales of
 *     another dtype than F32, intermediate_state_scales without state_scale, HORIZONTAL with
 *     an I16 state: UNSUPPORTED.
 *   state_scale (I16 state): (slots, nheads, dim) or (slots, nheads, dim, 1) (squeezed, as
 *     FlashInfer's Python layer), size(0) == state.size(0), stride(2) == 1, stride(1) == dim,
 *     stride(0) >= nheads * dim (slots' rows apart), 4-byte aligned; a seed with it:
 *     INVALID_VALUE (above). intermediate_state_scales (multi token): (batch, cache_steps,
 *     nheads, dim), contiguous, 4-byte aligned; required with an int16 intermediate buffer and
 *     state_scale, not read without the buffer.
 *   sizes: every tensor's leading sizes agree with x's (batch, T or total_tokens) and its inner
 *     ones with state's (nheads, dim, dstate) and B's (ngroups); state_batch_indices and
 *     dst_state_batch_indices 1-D or 2-D, size(0) >= batch, a 2-D one size(1) >= T (1 single
 *     token); num_accepted_tokens size(0) >= batch; intermediate_state_indices size(0) == batch.
 *   single token: FlashInfer ignores intermediate_states, intermediate_state_indices,
 *     intermediate_state_scales, num_accepted_tokens and a cache_steps < 1 there, and so does
 *     the check (not read, whatever their shapes); cu_seqlens with an x that is not 3-D is
 *     refused.
 *   multi token: algorithm AUTO or SIMPLE (FlashInfer's multi-token launcher built for sm_90
 *     takes no other); cache_steps >= 0, and >= 1 in the varlen form; cu_seqlens with a 4-D x
 *     refused; num_accepted_tokens needs state_batch_indices; intermediate_states contiguous
 *     with size(1) == cache_steps (FlashInfer's kernels step through the buffer by cache_steps;
 *     cache_steps 0 with a buffer is refused); intermediate_state_indices without
 *     intermediate_states is checked and not read.
 *   single-token HORIZONTAL: a head dim that is a multiple of 64 and at most 256, and no
 *     state_scale (FlashInfer's horizontal kernel refuses both: INVALID_ARGUMENT, its
 *     RuntimeError).
 *   options: a form, algorithm or seed mode / rule outside its enumeration, a reserved field
 *     not 0: INVALID_VALUE. The seed: see mamba_ssu_seed.
 *   limits (sizes, dstate 64/128/256, pointer alignment, 16-byte stride multiples, extents,
 *     grid size, out rows that do not overlap): as documented for mamba_ssu_params and
 *     mamba_ssu_mtp_params, whose checks the call is lowered to; their errors name the tensor.
 */

/* Most dimensions of a tensor descriptor. */
#define MAMBA_SSU_MAX_RANK 5

/* Formerly the most Philox rounds of stochastic rounding the kernels took. Kept for existing
 * callers: any count >= 1 is taken now (FlashInfer's philox_rounds has no upper bound); 5 and
 * 10, the most rounds of a compiled-in kernel, run the fast kernels. */
#define MAMBA_SSU_MAX_PHILOX_ROUNDS 10

/* A dtype the crate has no tag for (e.g. float64, int8): a front door passes it so that the
 * check, not the front door, rejects the tensor, naming it. */
#define MAMBA_SSU_DTYPE_OTHER (-1)

/* A tensor as its owner holds it. Absent (an optional argument not given): rank 0. */
typedef struct mamba_ssu_tensor {
  void *data;      /* device pointer to element [0, 0, ...] */
  int32_t dtype;   /* mamba_ssu_dtype, or MAMBA_SSU_DTYPE_OTHER */
  int32_t rank;    /* 0 (absent) .. MAMBA_SSU_MAX_RANK */
  int64_t shape[MAMBA_SSU_MAX_RANK];
  int64_t strides[MAMBA_SSU_MAX_RANK]; /* in elements */
} mamba_ssu_tensor;

/* Which path a call takes. */
typedef enum mamba_ssu_form {
  MAMBA_SSU_FORM_AUTO = 0,   /* FlashInfer's rule (above) */
  MAMBA_SSU_FORM_SINGLE = 1, /* the single-token decode step */
  MAMBA_SSU_FORM_MULTI = 2   /* T tokens per sequence (fixed length or varlen) */
} mamba_ssu_form;

/* A draw position of torch's CUDA generator: where one torch.randint(0, 2**32, (1,)) reads.
 * Eagerly the values (seed, offset); under CUDA-graph capture the generator's device state
 * (seed_ptr, offset_ptr: read when the kernel runs) plus offset, the intragraph offset. */
typedef struct mamba_ssu_position {
  const int64_t *seed_ptr;   /* NULL: the position is the values below */
  const int64_t *offset_ptr; /* with seed_ptr (both or neither), 8-byte aligned */
  uint64_t seed;             /* values: the generator's seed */
  uint64_t offset;           /* values: the draw's offset; device state: added to
                                *offset_ptr. A multiple of 4. */
} mamba_ssu_position;

/* Where the stochastic-rounding seed comes from. */
typedef enum mamba_ssu_seed_mode {
  /* No seed: the state is rounded to nearest (rounds is not read). */
  MAMBA_SSU_SEED_MODE_NONE = 0,
  /* FlashInfer's rand_seed: one int64 in device memory, read by the kernel (also a fused
   * chain's link, written by the previous call). */
  MAMBA_SSU_SEED_MODE_POINTER = 1,
  /* The kernel derives the seed itself as the stock draw at `position` (Philox4x32-10 word 1,
   * mamba_ssu_draw_seeds' value): no seed kernel. */
  MAMBA_SSU_SEED_MODE_DERIVED = 2
} mamba_ssu_seed_mode;

/* The seed of one call: its source, its rounds and its SR rule, the same for both forms.
 * Checked: mode and rule in their enumerations and reserved 0 (INVALID_VALUE); with a seed
 * (POINTER, DERIVED) rounds >= 1 (INVALID_VALUE; no upper bound, as FlashInfer) and an F16 state
 * (INVALID_ARGUMENT: FlashInfer's build refuses SR of another state dtype); pointer (POINTER), position's device pointers (when given) and next 8-byte
 * aligned; position's offset a multiple of 4 when it is read (DERIVED, or next set). Errors
 * name "philox_rounds", "sr_rule", "seed.mode", "seed.pointer", "seed.position", "seed.next". */
typedef struct mamba_ssu_seed {
  int32_t mode;   /* mamba_ssu_seed_mode */
  int32_t rounds; /* Philox rounds, >= 1 with a seed */
  int32_t rule;   /* mamba_ssu_sr_rule: the fp32 -> fp16 conversion */
  int32_t reserved; /* 0 */
  const int64_t *pointer;      /* MODE_POINTER: 8-byte aligned */
  mamba_ssu_position position; /* MODE_DERIVED; and the base of `next` */
  /* Optional (NULL: off): one extra thread block also stores the stock draw that FOLLOWS
   * `position` (its offset + 4) here: the next call of a fused chain reads it as its seed.
   * Needs a position, whatever the mode. 8-byte aligned. */
  int64_t *next;
  /* Optional: the prefetcher whose chain `next` belongs to (set by the prefetcher, not by
   * hand); a successful mamba_ssu_launch tells it that the kernel writing the link was
   * enqueued, so that the next request may hand the link out. */
  struct mamba_ssu_prefetcher *chain;
} mamba_ssu_seed;

/* One selective-state-update call, FlashInfer's arguments (absent tensors: rank 0). */
typedef struct mamba_ssu_args {
  mamba_ssu_tensor state, x, dt, A, B, C;
  mamba_ssu_tensor D, z, dt_bias; /* optional */
  mamba_ssu_tensor out;
  mamba_ssu_tensor state_batch_indices, dst_state_batch_indices; /* optional */
  /* Multi-token only (optional): */
  mamba_ssu_tensor intermediate_states, intermediate_state_indices;
  mamba_ssu_tensor cu_seqlens, num_accepted_tokens;
  /* An I16 state's float32 decode scales, one per state row (FlashInfer's block-scaled state;
   * single token): the state is read as rn(float(q) * state_scale[read slot, h, d]) and, where
   * it is written, each row is quantised from its fp32 values with m = max |s| over the row
   * (NaN ignored), e = 1 when m is 0 else rn(rcp.approx(m) * 32767), q = round-to-nearest-even
   * of clamp(rn(s * e), -32767, 32767), and rcp.approx(e) written to state_scale[write slot,
   * h, d] (docs/flashinfer-ssu.md, "int16 block-scaled state"). Without state_scale an I16
   * state is read as its integers and written with e = 1. A pad slot reads zeros (its scales
   * are not read). Multi token the state is read once and carried in fp32 across the tokens;
   * each written step (a dst slot, the read slot, or an intermediate entry's step) is quantised
   * from that step's values, its scales at the slot's state_scale row or, for the intermediate
   * buffer, at intermediate_state_scales[entry, step] (an entry >= its size(0) is not written;
   * FlashInfer writes past the tensor there). intermediate_state_scales is ignored on the
   * single-token path, as FlashInfer ignores it. */
  mamba_ssu_tensor state_scale, intermediate_state_scales;
  int64_t pad_slot_id;
  int64_t cache_steps;          /* FlashInfer's: 0 = not given */
  int32_t dt_softplus;          /* bool */
  int32_t disable_state_update; /* bool, FlashInfer's sense: 1 leaves the state untouched
                                   (without a write tensor) */
  int32_t algorithm;            /* mamba_ssu_algorithm (the single-token layout) */
  int32_t form;                 /* mamba_ssu_form */
  int32_t num_sms;              /* <= 0: query the current device (grid sizing, ALGO_AUTO) */
  int32_t reserved;             /* 0 */
  mamba_ssu_seed seed;
} mamba_ssu_args;

/* What a checked call is, after the normalisation above. */
typedef struct mamba_ssu_problem {
  int32_t form;   /* MAMBA_SSU_FORM_SINGLE or MAMBA_SSU_FORM_MULTI */
  int32_t varlen; /* bool */
  int64_t batch;  /* sequences */
  int64_t ntokens;      /* single: 1; multi: T, or (varlen) cache_steps */
  int64_t total_tokens; /* varlen: token rows of x; else batch * ntokens */
  int64_t nheads, dim, dstate, ngroups;
  int64_t state_cache_size;
  int64_t cache_steps;             /* with intermediate_states: its size(1); else 0 */
  int64_t intermediate_cache_size; /* with intermediate_states: its size(0); else 0 */
  int32_t state_dtype, input_dtype, weight_dtype;
  int32_t index_dtype;             /* the slot indices' (state_batch_indices', else
                                      dst_state_batch_indices', else
                                      intermediate_state_indices'), else cu_seqlens', else I32 */
  int32_t stochastic_rounding;     /* bool: a seed with rounds > 0 */
  int32_t algorithm;               /* single token: SIMPLE or VERTICAL as resolved for an
                                      sm_90-family device of num_sms SMs (num_sms <= 0 and
                                      ALGO_AUTO: AUTO, unresolved; the launch resolves it on
                                      its device, see mamba_ssu_plan_for_device) */
} mamba_ssu_problem;

/* Checks *args against the whole contract (no device is touched: pointers are checked, never
 * dereferenced) and, when problem is not NULL, fills it. Returns a status; on failure
 * mamba_ssu_last_error_argument() names the argument and the detail says what was expected. */
int mamba_ssu_check(const mamba_ssu_args *args, mamba_ssu_problem *problem);

/* Checks *args like mamba_ssu_check and enqueues the call on stream. */
int mamba_ssu_launch(mamba_ssu_stream_t stream, const mamba_ssu_args *args);

/* Checks *args and fills *out with the launch configuration mamba_ssu_launch would use on the
 * current device (num_sms <= 0; its properties are queried once and cached), or, with
 * num_sms > 0, on a device of the sm_90 family (H100, H200: MAMBA_SSU_DEVICE_PROPS_SM90's
 * per-SM limits) with num_sms multiprocessors, touching no device. Nothing is launched.
 * mamba_ssu_plan_for_device plans for any other GPU. */
int mamba_ssu_plan(const mamba_ssu_args *args, int32_t num_sms, mamba_ssu_launch_plan *out);

/* What launch planning reads of a GPU. mamba_ssu_launch plans with the current device's,
 * queried once per device (mamba_ssu_device_props_query) and then cached, with num_sms replaced
 * by mamba_ssu_args.num_sms when that is > 0. A planner for another GPU (or a test) fills one
 * from NVIDIA's tables for its compute capability. */
typedef struct mamba_ssu_device_props {
  int32_t cc_major, cc_minor;      /* compute capability: e.g. 9, 0 (H200); 8, 0 (A100) */
  int32_t num_sms;                 /* multiprocessors */
  int32_t max_threads_per_sm;      /* resident threads per SM: 2048 (sm_80, 90, 100), 1536
                                      (sm_86, 89, 120) */
  int32_t max_blocks_per_sm;       /* resident blocks per SM: 32, or 16 (sm_86), 24 (sm_89) */
  int32_t regs_per_sm;             /* 32-bit registers per SM: 65536 */
  int32_t smem_per_sm;             /* shared memory per SM, bytes (228 KiB on sm_90) */
  int32_t smem_per_block;          /* a block's shared memory without opt-in, bytes (48 KiB) */
  int32_t reserved_smem_per_block; /* shared memory the system reserves per block, bytes */
  int32_t reserved;                /* 0 */
} mamba_ssu_device_props;

/* The sm_90 family's per-SM limits (H100, H200), with num_sms multiprocessors: what
 * mamba_ssu_plan and mamba_ssu_check assume when given only an SM count. */
#define MAMBA_SSU_DEVICE_PROPS_SM90(num_sms) \
  { 9, 0, (num_sms), 2048, 32, 65536, 233472, 49152, 1024, 0 }

/* Fills *out with MAMBA_SSU_DEVICE_PROPS_SM90(num_sms) (num_sms >= 1): the template for
 * callers that cannot expand the macro (bindings). No device is touched. */
int mamba_ssu_device_props_sm90(int32_t num_sms, mamba_ssu_device_props *out);

/* Fills *out with the properties of CUDA device `device` (< 0: the current device), queried on
 * the first call for that device and cached (later calls touch no device). */
int mamba_ssu_device_props_query(int32_t device, mamba_ssu_device_props *out);

/* Checks *args and fills *out with the launch configuration for a GPU with the properties
 * *props (checked: every count >= 1, reserved 0). A pure function: no device is touched. Where
 * FlashInfer's ALGO_AUTO depends on the GPU, so does this plan's algorithm (compute capability
 * below 9: SIMPLE, as FlashInfer's kernels built for those GPUs). */
int mamba_ssu_plan_for_device(const mamba_ssu_args *args, const mamba_ssu_device_props *props,
                              mamba_ssu_launch_plan *out);

/* mamba_ssu_resolve_algorithm on a GPU with the properties *props (checked as by
 * mamba_ssu_plan_for_device; no device is touched), for an F32 state. */
int mamba_ssu_resolve_algorithm_for_device(int32_t algorithm, int64_t batch, int64_t nheads,
                                           const mamba_ssu_device_props *props);

/* The algorithm a single-token call of batch*nheads heads of dim rows with a state of
 * state_dtype (F32, F16 or BF16) runs on a GPU with the properties *props: ALGO_AUTO by
 * FlashInfer's rule (mamba_ssu_algorithm: HORIZONTAL from sm_100 on for a 2-byte state and a
 * head dim it takes); SIMPLE, VERTICAL and HORIZONTAL resolve to themselves. A pure function.
 * Failure: minus the status (MAMBA_SSU_ERROR_INVALID_ARGUMENT for a null or invalid props, a
 * state_dtype that is not a float dtype, dim < 1, or HORIZONTAL with a head dim it does not
 * take; MAMBA_SSU_ERROR_INVALID_VALUE for an algorithm outside the enumeration). */
int mamba_ssu_resolve_algorithm_for_state(int32_t algorithm, int64_t batch, int64_t nheads,
                                          int64_t dim, int32_t state_dtype,
                                          const mamba_ssu_device_props *props);

/* The fused path of the prefetcher, producing a mamba_ssu_seed:
 *
 * mamba_ssu_prefetcher_derive_seed: this call's stock draw from the host generator (advanced
 * by one draw, 4, exactly as stock), eagerly by value and under capture from the prefetcher's
 * device state plus the intragraph offset (mamba_ssu_prefetcher_prepare_replay).
 * mamba_ssu_prefetcher_derive_seed_at: the same at a position the caller took from its own
 * generator (torch's philox_cuda_state(4)): nothing is advanced here.
 * Both fill seed->mode, pointer, position, next and chain (rounds, rule and reserved are left
 * as the caller set them). Outside a forward the seed is derived in the kernel. Inside a fused
 * forward (begin_fused_forward) request k < N of the forward is chained: request 0 derives,
 * each request sets `next` to the following link, and request k > 0 reads its link (MODE_POINTER)
 * when the previous request's launch succeeded (seed->chain) and this position is the draw
 * right after it; otherwise it derives its own seed. Values are the stock sequence either way.
 * Inside a prefetching forward both are MAMBA_SSU_ERROR_SCOPE. */
int mamba_ssu_prefetcher_derive_seed(mamba_ssu_prefetcher *p, mamba_ssu_stream_t stream,
                                     mamba_ssu_generator_state *generator,
                                     mamba_ssu_seed *seed);
int mamba_ssu_prefetcher_derive_seed_at(mamba_ssu_prefetcher *p, mamba_ssu_stream_t stream,
                                        const mamba_ssu_position *position,
                                        mamba_ssu_seed *seed);

/* Begins a fused forward on main like mamba_ssu_prefetcher_begin_fused_forward, its chain links
 * in `links` (N int64 values of device memory that the caller keeps alive while any work or
 * CUDA graph that uses them may run; NULL: the prefetcher's own buffer). generator may be NULL
 * when every request of the forward gives its position (derive_seed_at). */
int mamba_ssu_prefetcher_begin_fused_forward_links(mamba_ssu_prefetcher *p,
                                                   mamba_ssu_stream_t main,
                                                   const mamba_ssu_generator_state *generator,
                                                   int64_t *links);

/* ------------------------------------------------------------------------ */
/* Filler: a stand-in for a layer's other kernels (tests and benchmarks)     */
/* ------------------------------------------------------------------------ */

/* One kernel that reads and rewrites buf[0..n) `rounds` times (buf[i] = buf[i] * 0.5f + 1.0f
 * per round): a memory-touching kernel of a chosen size, standing in for the conv1d update of
 * a Mamba-2 layer in the decode-step benchmark and the prefetcher tests. n >= 1, rounds >= 1.
 * Test and benchmark support, OUTSIDE the stable ABI: it stays declared so that existing
 * callers build, but it may change or go in any release; engines should not call it (the Rust
 * crate exposes it only under its unstable `bench-support` feature). */
int mamba_ssu_filler(mamba_ssu_stream_t stream, float *buf, uint64_t n, uint32_t rounds);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MAMBA_SSU_H */
