// seeds.cu — batched, torch-identical seed draws.
//
// Thread k writes value(seed, base + 4k): word 1 of Philox4x32-10 with key
// (lo(seed), hi(seed)) and counter (base/4 + k, 0, 0, 0). Threads are
// independent, so N seeds take one launch of ceil(N / 256) blocks.
#include "common.cuh"
#include "philox.cuh"

namespace mamba_ssu {
namespace {

constexpr int kSeedThreads = 256;

__global__ void draw_seeds_kernel(int64_t *__restrict__ out, uint32_t n, uint64_t seed,
                                  uint64_t offset) {
  const uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n) out[k] = torch_seed_draw(seed, offset + 4ull * k);
}

// Graph-safe: (seed, offset) come from device memory when the kernel runs (the two fields of
// a mamba_ssu_generator_state, or torch's two separate device values).
__global__ void draw_seeds_graphsafe_kernel(int64_t *__restrict__ out, uint32_t n,
                                            const uint64_t *__restrict__ seed_ptr,
                                            const uint64_t *__restrict__ offset_ptr,
                                            uint64_t intragraph_offset) {
  const uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n) {
    const uint64_t seed = *seed_ptr;
    const uint64_t offset = *offset_ptr + intragraph_offset;
    out[k] = torch_seed_draw(seed, offset + 4ull * k);
  }
}

// Counter seeds: one block, so that every thread has read the counter before thread 0 writes it
// back. Unsigned arithmetic: the int64 wrap-around of torch's add_, without signed overflow.
__global__ void counter_seeds_kernel(int64_t *__restrict__ counter, int64_t *__restrict__ out,
                                     uint32_t n) {
  const uint64_t base = static_cast<uint64_t>(*counter);
  for (uint32_t k = threadIdx.x; k < n; k += blockDim.x)
    out[k] = static_cast<int64_t>(base + k + 1);
  __syncthreads();
  if (threadIdx.x == 0) *counter = static_cast<int64_t>(base + n);
}

__global__ void set_generator_state_kernel(mamba_ssu_generator_state *state, uint64_t seed,
                                           uint64_t offset) {
  state->seed = seed;
  state->offset = offset;
}

int check_draw_args(const int64_t *out, uint32_t n) {
  if (out == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "out: null pointer");
  if (reinterpret_cast<uintptr_t>(out) % alignof(int64_t) != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "out: not 8-byte aligned");
  if (n == 0 || n > MAMBA_SSU_MAX_SEEDS_PER_DRAW)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "n: expected 1..=%u, got %u",
                MAMBA_SSU_MAX_SEEDS_PER_DRAW, n);
  return MAMBA_SSU_SUCCESS;
}

unsigned blocks_for(uint32_t n) { return (n + kSeedThreads - 1) / kSeedThreads; }

}  // namespace
}  // namespace mamba_ssu

using namespace mamba_ssu;

extern "C" int mamba_ssu_draw_seeds(mamba_ssu_stream_t stream, int64_t *out, uint32_t n,
                                    uint64_t seed, uint64_t offset) {
  clear_error();
  if (int s = check_draw_args(out, n)) return s;
  if (offset % 4 != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "offset: expected a multiple of 4, got %llu",
                static_cast<unsigned long long>(offset));
  draw_seeds_kernel<<<blocks_for(n), kSeedThreads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
      out, n, seed, offset);
  return check_launch("draw_seeds launch");
}

extern "C" int mamba_ssu_draw_seeds_graphsafe(mamba_ssu_stream_t stream, int64_t *out, uint32_t n,
                                              const mamba_ssu_generator_state *state,
                                              uint64_t intragraph_offset) {
  clear_error();
  if (int s = check_draw_args(out, n)) return s;
  if (state == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "state: null pointer");
  if (reinterpret_cast<uintptr_t>(state) % alignof(uint64_t) != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "state: not 8-byte aligned");
  if (intragraph_offset % 4 != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "intragraph_offset: expected a multiple of 4, got %llu",
                static_cast<unsigned long long>(intragraph_offset));
  draw_seeds_graphsafe_kernel<<<blocks_for(n), kSeedThreads, 0,
                                reinterpret_cast<cudaStream_t>(stream)>>>(
      out, n, &state->seed, &state->offset, intragraph_offset);
  return check_launch("draw_seeds_graphsafe launch");
}

extern "C" int mamba_ssu_draw_seeds_graphsafe_pair(mamba_ssu_stream_t stream, int64_t *out,
                                                   uint32_t n, const int64_t *seed_ptr,
                                                   const int64_t *offset_ptr,
                                                   uint64_t intragraph_offset) {
  clear_error();
  if (int s = check_draw_args(out, n)) return s;
  if (seed_ptr == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "seed_ptr: null pointer");
  if (offset_ptr == nullptr)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "offset_ptr: null pointer");
  if (reinterpret_cast<uintptr_t>(seed_ptr) % alignof(uint64_t) != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "seed_ptr: not 8-byte aligned");
  if (reinterpret_cast<uintptr_t>(offset_ptr) % alignof(uint64_t) != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "offset_ptr: not 8-byte aligned");
  if (intragraph_offset % 4 != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "intragraph_offset: expected a multiple of 4, got %llu",
                static_cast<unsigned long long>(intragraph_offset));
  draw_seeds_graphsafe_kernel<<<blocks_for(n), kSeedThreads, 0,
                                reinterpret_cast<cudaStream_t>(stream)>>>(
      out, n, reinterpret_cast<const uint64_t *>(seed_ptr),
      reinterpret_cast<const uint64_t *>(offset_ptr), intragraph_offset);
  return check_launch("draw_seeds_graphsafe_pair launch");
}

extern "C" int mamba_ssu_counter_seeds(mamba_ssu_stream_t stream, int64_t *counter, int64_t *out,
                                       uint32_t n) {
  clear_error();
  if (int s = check_draw_args(out, n)) return s;
  if (counter == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "counter: null pointer");
  if (reinterpret_cast<uintptr_t>(counter) % alignof(int64_t) != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "counter: not 8-byte aligned");
  const uintptr_t c = reinterpret_cast<uintptr_t>(counter), o = reinterpret_cast<uintptr_t>(out);
  if (c >= o && c - o < sizeof(int64_t) * uint64_t{n})
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "counter: inside out[0..%u) (the counter must not be one of the seeds)", n);
  counter_seeds_kernel<<<1, kSeedThreads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(counter,
                                                                                       out, n);
  return check_launch("counter_seeds launch");
}

extern "C" int mamba_ssu_set_generator_state(mamba_ssu_stream_t stream,
                                             mamba_ssu_generator_state *state, uint64_t seed,
                                             uint64_t offset) {
  clear_error();
  if (state == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "state: null pointer");
  if (reinterpret_cast<uintptr_t>(state) % alignof(uint64_t) != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "state: not 8-byte aligned");
  if (offset % 4 != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "offset: expected a multiple of 4, got %llu",
                static_cast<unsigned long long>(offset));
  set_generator_state_kernel<<<1, 1, 0, reinterpret_cast<cudaStream_t>(stream)>>>(state, seed,
                                                                                  offset);
  return check_launch("set_generator_state launch");
}
