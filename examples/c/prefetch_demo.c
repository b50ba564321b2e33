/* prefetch_demo.c — a C program that drives the seed prefetcher through mamba_ssu.h, as a C++
 * engine would in its layer loop.
 *
 * Usage: prefetch_demo SEED OFFSET N LAYERS
 * Creates a prefetcher for N stochastic-rounding layers, runs one forward of LAYERS seed
 * requests on a stream (layers >= N fall back to inline stock draws), copies each layer's seed
 * on the stream like a consumer kernel would, ends the forward and prints
 * {"draws":[...],"offset_after":O,"prefetched":P,"fallback":F}.
 * Exit codes: 0 success, 2 bad arguments, 3 a mamba_ssu or CUDA error, 77 no CUDA device.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char **argv) {
  uint64_t seed, offset, n, layers;
  if (argc != 5 || !parse_u64(argv[1], &seed) || !parse_u64(argv[2], &offset) ||
      !parse_u64(argv[3], &n) || !parse_u64(argv[4], &layers) || n == 0 || layers == 0 ||
      n > 4096 || layers > 4096) {
    fprintf(stderr, "usage: prefetch_demo SEED OFFSET N LAYERS (N, LAYERS in 1..=4096)\n");
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    fprintf(stderr, "prefetch_demo: no CUDA device\n");
    return 77;
  }
  cudaStream_t stream;
  int64_t *d_results = NULL;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc((void **)&d_results, layers * sizeof(int64_t)) != cudaSuccess) {
    fprintf(stderr, "prefetch_demo: CUDA setup failed\n");
    return 3;
  }
  mamba_ssu_prefetcher *p = NULL;
  mamba_ssu_generator_state gen = {seed, offset};
  if (check(mamba_ssu_prefetcher_create(&p, (uint32_t)n, MAMBA_SSU_PREFETCH_AT_BEGIN), "create"))
    return 3;
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
