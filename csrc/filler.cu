// filler.cu — a memory-touching stand-in kernel for a layer's other work (conv1d update) in
// the decode-step benchmark and the prefetcher tests.
#include "common.cuh"

namespace mamba_ssu {
namespace {

__global__ void filler_kernel(float *__restrict__ buf, uint64_t n, uint32_t rounds) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    float v = buf[i];
    for (uint32_t r = 0; r < rounds; ++r) v = __fadd_rn(__fmul_rn(v, 0.5f), 1.0f);
    buf[i] = v;
  }
}

}  // namespace
}  // namespace mamba_ssu

extern "C" int mamba_ssu_filler(mamba_ssu_stream_t stream, float *buf, uint64_t n,
                                uint32_t rounds) {
  using namespace mamba_ssu;
  clear_error();
  if (buf == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "buf: null pointer");
  if (n == 0) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "n: expected >= 1, got 0");
  if (rounds == 0) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "rounds: expected >= 1, got 0");
  const uint64_t threads = 256;
  uint64_t blocks = (n + threads - 1) / threads;
  if (blocks > 4096) blocks = 4096;
  filler_kernel<<<static_cast<unsigned>(blocks), threads, 0,
                  reinterpret_cast<cudaStream_t>(stream)>>>(buf, n, rounds);
  return check_launch("filler launch");
}
