/* seeds_demo.c — a C program that uses mamba-ssu through its header and static library.
 *
 * Usage: seeds_demo SEED OFFSET COUNT
 * Draws COUNT torch-identical seeds from generator state (SEED, OFFSET) on the GPU in one
 * launch and prints {"seed":S,"offset":O,"draws":[...],"offset_after":O2}.
 * Exit codes: 0 success, 2 bad arguments, 3 a mamba_ssu or CUDA error, 77 no CUDA device.
 * With MAMBA_SSU_DEMO_STALE_ERROR=1 in the environment it first leaves a stale runtime error on
 * the thread (cudaSetDevice of a device that does not exist): the draw must still succeed and
 * report success (the C ABI attributes only its own launch errors).
 *
 * Build (see README, "C and C++"):
 *   cc -std=c11 -Iinclude seeds_demo.c -Llib -lmamba_ssu -lcudart_static -lstdc++ -ldl -lpthread -lrt
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
  unsigned long long v = strtoull(s, &end, 0); /* decimal or 0x-hex */
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-') return 0;
  *out = (uint64_t)v;
  return 1;
}

int main(int argc, char **argv) {
  uint64_t seed, offset, count;
  if (argc != 4 || !parse_u64(argv[1], &seed) || !parse_u64(argv[2], &offset) ||
      !parse_u64(argv[3], &count) || count == 0 || count > MAMBA_SSU_MAX_SEEDS_PER_DRAW) {
    fprintf(stderr, "usage: seeds_demo SEED OFFSET COUNT (COUNT in 1..=%u)\n",
            MAMBA_SSU_MAX_SEEDS_PER_DRAW);
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    fprintf(stderr, "seeds_demo: no CUDA device\n");
    return 77;
  }
  cudaStream_t stream;
  int64_t *d_out = NULL;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc((void **)&d_out, count * sizeof(int64_t)) != cudaSuccess) {
    fprintf(stderr, "seeds_demo: CUDA setup failed\n");
    return 3;
  }
  const char *stale = getenv("MAMBA_SSU_DEMO_STALE_ERROR");
  if (stale != NULL && stale[0] == '1' && cudaSetDevice(ndev) == cudaSuccess) {
    fprintf(stderr, "seeds_demo: cudaSetDevice(%d) unexpectedly succeeded\n", ndev);
    return 3;
  }
  int st = mamba_ssu_draw_seeds((mamba_ssu_stream_t)stream, d_out, (uint32_t)count, seed, offset);
  if (st != MAMBA_SSU_SUCCESS) {
    fprintf(stderr, "seeds_demo: %s: %s\n", mamba_ssu_status_string(st),
            mamba_ssu_last_error_detail());
    return st == MAMBA_SSU_ERROR_INVALID_ARGUMENT ? 2 : 3;
  }
  int64_t *h_out = malloc(count * sizeof(int64_t));
  if (h_out == NULL ||
      cudaMemcpyAsync(h_out, d_out, count * sizeof(int64_t), cudaMemcpyDeviceToHost, stream) !=
          cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess) {
    fprintf(stderr, "seeds_demo: copy back failed\n");
    return 3;
  }
  printf("{\"seed\":%" PRIu64 ",\"offset\":%" PRIu64 ",\"draws\":[", seed, offset);
  for (uint64_t k = 0; k < count; ++k) printf("%s%" PRId64, k ? "," : "", h_out[k]);
  printf("],\"offset_after\":%" PRIu64 "}\n", offset + 4 * count);
  free(h_out);
  cudaFree(d_out);
  cudaStreamDestroy(stream);
  return 0;
}
