/* prefetch_demo.c — a C program that drives the seed prefetcher through mamba_ssu.h, as a C++
 * engine would in its layer loop.
 *
 * Usage: prefetch_demo SEED OFFSET N LAYERS [fused]
 * Creates a prefetcher for N stochastic-rounding layers and runs one forward of LAYERS layers on
 * a stream.
 * Default (prefetching forward): each layer's seed request (layers >= N fall back to inline stock
 * draws) is copied on the stream like a consumer kernel would; prints
 * {"draws":[...],"offset_after":O,"prefetched":P,"fallback":F}.
 * fused: a fused forward whose links live in a buffer of the program's own
 * (begin_fused_forward_links); each layer derives its seed (derive_seed) and consumes it with one
 * selective-state-update (mamba_ssu_launch) on a small fp16 state, which stores the next layer's
 * seed in the links buffer; then a second fused forward leaves one seed unconsumed and records
 * whether the next request is refused (MAMBA_SSU_ERROR_SCOPE). Prints
 * {"links":[...],"offset_after":O,"prefetched":P,"fallback":F,"scope_error":B}: links[k - 1] is
 * the seed layer k read (k = 1 .. min(N, LAYERS) - 1), written by layer k - 1's kernel.
 * Exit codes: 0 success, 2 bad arguments, 3 a mamba_ssu or CUDA error, 77 no CUDA device.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "mamba_ssu.h"

static int parse_u64(const char *s, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-') return 0;
  *out = (uint64_t)v;
  return 1;
}

static int check(int st, const char *what) {
  if (st != MAMBA_SSU_SUCCESS) {
    fprintf(stderr, "prefetch_demo: %s: %s: %s\n", what, mamba_ssu_status_string(st),
            mamba_ssu_last_error_detail());
    return 1;
  }
  return 0;
}

/* Device buffers of a small single-token problem: batch 1, one head, dim 16, dstate 64, fp16
 * state, inputs and weights. */
enum { kDim = 16, kDstate = 64 };
typedef struct Ssu {
  void *state, *x, *dt, *B, *C, *out;
  float *A;
} Ssu;

static mamba_ssu_tensor dense(void *data, int32_t dtype, int rank, const int64_t *shape) {
  mamba_ssu_tensor t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = dtype;
  t.rank = rank;
  int64_t stride = 1;
  for (int k = rank - 1; k >= 0; --k) {
    t.shape[k] = shape[k];
    t.strides[k] = stride;
    stride *= shape[k];
  }
  return t;
}

static int alloc_ssu(Ssu *s) {
  const size_t sizes[] = {2 * kDim * kDstate, 2 * kDim, 2, 2 * kDstate, 2 * kDstate, 2 * kDim, 4};
  void **ptrs[] = {&s->state, &s->x, &s->dt, &s->B, &s->C, &s->out, (void **)&s->A};
  for (int i = 0; i < 7; ++i) {
    if (cudaMalloc(ptrs[i], sizes[i]) != cudaSuccess || cudaMemset(*ptrs[i], 0, sizes[i]) != cudaSuccess)
      return 1;
  }
  return 0;
}

/* One selective-state-update with `seed`: (1, 1, 16, 64) fp16 state, x/dt/out (1, 1, 16),
 * B/C (1, 1, 64), A (1, 16, 64) strides (1, 0, 0), dt strides (1, 1, 0). */
static int launch_ssu(cudaStream_t stream, const Ssu *s, const mamba_ssu_seed *seed) {
  const int64_t state_shape[] = {1, 1, kDim, kDstate}, row[] = {1, 1, kDim}, bc[] = {1, 1, kDstate};
  mamba_ssu_args a;
  memset(&a, 0, sizeof(a));
  a.state = dense(s->state, MAMBA_SSU_F16, 4, state_shape);
  a.x = dense(s->x, MAMBA_SSU_F16, 3, row);
  a.out = dense(s->out, MAMBA_SSU_F16, 3, row);
  a.dt = dense(s->dt, MAMBA_SSU_F16, 3, row);
  a.dt.strides[2] = 0;
  a.B = dense(s->B, MAMBA_SSU_F16, 3, bc);
  a.C = dense(s->C, MAMBA_SSU_F16, 3, bc);
  const int64_t a_shape[] = {1, kDim, kDstate};
  a.A = dense(s->A, MAMBA_SSU_F32, 3, a_shape);
  a.A.strides[0] = 1;
  a.A.strides[1] = 0;
  a.A.strides[2] = 0;
  a.pad_slot_id = -1;
  a.seed = *seed;
  return check(mamba_ssu_launch((mamba_ssu_stream_t)stream, &a), "launch");
}

static int fused_seed(mamba_ssu_prefetcher *p, cudaStream_t stream,
                      mamba_ssu_generator_state *gen, mamba_ssu_seed *seed, int *status) {
  memset(seed, 0, sizeof(*seed));
  seed->rounds = 10;
  seed->rule = MAMBA_SSU_SR_V072;
  *status = mamba_ssu_prefetcher_derive_seed(p, (mamba_ssu_stream_t)stream, gen, seed);
  return *status != MAMBA_SSU_SUCCESS && *status != MAMBA_SSU_ERROR_SCOPE
             ? check(*status, "derive_seed")
             : 0;
}

static int run_fused(mamba_ssu_prefetcher *p, cudaStream_t stream, mamba_ssu_generator_state *gen,
                     uint64_t n, uint64_t layers) {
  Ssu ssu;
  int64_t *links = NULL;
  if (alloc_ssu(&ssu) || cudaMalloc((void **)&links, n * sizeof(int64_t)) != cudaSuccess ||
      cudaMemset(links, 0, n * sizeof(int64_t)) != cudaSuccess) {
    fprintf(stderr, "prefetch_demo: CUDA setup failed\n");
    return 3;
  }
  mamba_ssu_seed seed;
  int status = 0;
  if (check(mamba_ssu_prefetcher_begin_fused_forward_links(p, (mamba_ssu_stream_t)stream, gen,
                                                           links),
            "begin fused"))
    return 3;
  for (uint64_t k = 0; k < layers; ++k) {
    if (fused_seed(p, stream, gen, &seed, &status) || check(status, "derive_seed") ||
        launch_ssu(stream, &ssu, &seed))
      return 3;
  }
  mamba_ssu_forward_summary summary;
  if (check(mamba_ssu_prefetcher_end_forward(p, &summary), "end")) return 3;
  const uint64_t offset_after = gen->offset;

  /* A seed requested but never consumed: its link is never written, so the next request is
   * refused rather than handed a stale link; requesting again derives the seed. */
  int scope_error = 0;
  if (check(mamba_ssu_prefetcher_begin_fused_forward(p, (mamba_ssu_stream_t)stream, gen),
            "begin fused") ||
      fused_seed(p, stream, gen, &seed, &status) || check(status, "derive_seed") ||
      launch_ssu(stream, &ssu, &seed) || fused_seed(p, stream, gen, &seed, &status) ||
      check(status, "derive_seed") || fused_seed(p, stream, gen, &seed, &status))
    return 3;
  scope_error = status == MAMBA_SSU_ERROR_SCOPE;
  if (fused_seed(p, stream, gen, &seed, &status) || check(status, "derive_seed") ||
      launch_ssu(stream, &ssu, &seed) ||
      check(mamba_ssu_prefetcher_end_forward(p, NULL), "end"))
    return 3;

  const uint64_t m = n < layers ? n : layers;
  int64_t *h = malloc(n * sizeof(int64_t));
  if (h == NULL ||
      cudaMemcpyAsync(h, links, n * sizeof(int64_t), cudaMemcpyDeviceToHost, stream) !=
          cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess) {
    fprintf(stderr, "prefetch_demo: copy back failed\n");
    return 3;
  }
  printf("{\"links\":[");
  for (uint64_t k = 1; k < m; ++k) printf("%s%" PRId64, k > 1 ? "," : "", h[k]);
  printf("],\"offset_after\":%" PRIu64 ",\"prefetched\":%u,\"fallback\":%u,\"scope_error\":%s}\n",
         offset_after, summary.prefetched, summary.fallback, scope_error ? "true" : "false");
  free(h);
  cudaFree(links);
  return 0;
}

int main(int argc, char **argv) {
  uint64_t seed, offset, n, layers;
  const int fused = argc == 6 && strcmp(argv[5], "fused") == 0;
  if ((argc != 5 && !fused) || !parse_u64(argv[1], &seed) || !parse_u64(argv[2], &offset) ||
      !parse_u64(argv[3], &n) || !parse_u64(argv[4], &layers) || n == 0 || layers == 0 ||
      n > 4096 || layers > 4096) {
    fprintf(stderr, "usage: prefetch_demo SEED OFFSET N LAYERS [fused] (N, LAYERS in 1..=4096)\n");
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    fprintf(stderr, "prefetch_demo: no CUDA device\n");
    return 77;
  }
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    fprintf(stderr, "prefetch_demo: CUDA setup failed\n");
    return 3;
  }
  mamba_ssu_prefetcher *p = NULL;
  mamba_ssu_generator_state gen = {seed, offset};
  if (check(mamba_ssu_prefetcher_create(&p, (uint32_t)n, MAMBA_SSU_PREFETCH_AT_BEGIN), "create"))
    return 3;
  if (fused) {
    const int rc = run_fused(p, stream, &gen, n, layers);
    if (rc) return rc;
    if (check(mamba_ssu_prefetcher_destroy(p), "destroy")) return 3;
    cudaStreamDestroy(stream);
    return 0;
  }
  int64_t *d_results = NULL;
  if (cudaMalloc((void **)&d_results, layers * sizeof(int64_t)) != cudaSuccess) {
    fprintf(stderr, "prefetch_demo: CUDA setup failed\n");
    return 3;
  }
  if (check(mamba_ssu_prefetcher_begin_forward(p, (mamba_ssu_stream_t)stream, &gen), "begin"))
    return 3;
  for (uint32_t k = 0; k < layers; ++k) {
    const int64_t *seed_ptr = NULL;
    if (check(mamba_ssu_prefetcher_seed(p, (mamba_ssu_stream_t)stream, &gen, k, &seed_ptr),
              "seed"))
      return 3;
    /* The consumer: here a copy on the stream; in an engine, the SSU kernel's rand_seed. */
    if (cudaMemcpyAsync(d_results + k, seed_ptr, sizeof(int64_t), cudaMemcpyDeviceToDevice,
                        stream) != cudaSuccess) {
      fprintf(stderr, "prefetch_demo: copy failed\n");
      return 3;
    }
  }
  mamba_ssu_forward_summary summary;
  if (check(mamba_ssu_prefetcher_end_forward(p, &summary), "end")) return 3;
  int64_t *h = malloc(layers * sizeof(int64_t));
  if (h == NULL ||
      cudaMemcpyAsync(h, d_results, layers * sizeof(int64_t), cudaMemcpyDeviceToHost, stream) !=
          cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess) {
    fprintf(stderr, "prefetch_demo: copy back failed\n");
    return 3;
  }
  printf("{\"draws\":[");
  for (uint64_t k = 0; k < layers; ++k) printf("%s%" PRId64, k ? "," : "", h[k]);
  printf("],\"offset_after\":%" PRIu64 ",\"prefetched\":%u,\"fallback\":%u}\n", gen.offset,
         summary.prefetched, summary.fallback);
  free(h);
  if (check(mamba_ssu_prefetcher_destroy(p), "destroy")) return 3;
  cudaFree(d_results);
  cudaStreamDestroy(stream);
  return 0;
}
