// philox.cuh — Philox4x32-R on the device (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC'11), as cuRAND and torch use it.
//
// One round: p0 = M0 * c0, p1 = M1 * c2 (64-bit products);
//   c' = (hi(p1) ^ c1 ^ k0, lo(p1), hi(p0) ^ c3 ^ k1, lo(p0));
// between rounds the key is bumped by the Weyl constants W0, W1.
// The round count is a template parameter (1..10: the compiled-in kernels' 5 and 10, torch's
// 10); philox4x32_dyn takes any count >= 1 at run time (a loop) for the generic kernels. Also
// torch's seed draw (torch_seed_draw).
// Included by seeds.cu (the batched and graph-safe seed draws), philox_words.cuh (the SR
// random words) and so ssu.cuh (the random words and the fused seed).
#pragma once

#include <stdint.h>

namespace mamba_ssu {

struct U32x4 {
  uint32_t x, y, z, w;
};

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

__device__ __forceinline__ U32x4 philox_round(U32x4 c, uint32_t k0, uint32_t k1) {
  const uint32_t hi0 = __umulhi(kPhiloxM0, c.x);
  const uint32_t lo0 = kPhiloxM0 * c.x;
  const uint32_t hi1 = __umulhi(kPhiloxM1, c.z);
  const uint32_t lo1 = kPhiloxM1 * c.z;
  return U32x4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
}

// Philox4x32 with ROUNDS rounds; key (k0, k1), counter c.
template <int ROUNDS>
__device__ __forceinline__ U32x4 philox4x32(U32x4 c, uint32_t k0, uint32_t k1) {
  static_assert(ROUNDS >= 1 && ROUNDS <= 10, "Philox rounds must be in 1..=10");
#pragma unroll
  for (int r = 0; r < ROUNDS; ++r) {
    c = philox_round(c, k0, k1);
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return c;
}

// Round count at run time (any count >= 1: FlashInfer has no upper bound), for the kernels that
// serve every round count.
__device__ __forceinline__ U32x4 philox4x32_dyn(U32x4 c, uint32_t k0, uint32_t k1,
                                                int rounds) {
#pragma unroll 1
  for (int r = 0; r < rounds; ++r) {
    c = philox_round(c, k0, k1);
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return c;
}

// Philox counter for a 64-bit offset o (in units of 4-word blocks for torch's
// draws, in elements for FlashInfer's state rounding): (lo(o), hi(o), 0, 0).
__device__ __forceinline__ U32x4 philox_counter(uint64_t o) {
  return U32x4{static_cast<uint32_t>(o), static_cast<uint32_t>(o >> 32), 0u, 0u};
}

// One stock torch.randint(0, 2**32, (1,)) draw from generator state
// (seed, offset): word 1 of Philox4x32-10 with key (lo(seed), hi(seed)) and
// counter (offset / 4, thread 0).
__device__ __forceinline__ int64_t torch_seed_draw(uint64_t seed, uint64_t offset) {
  const U32x4 r = philox4x32<10>(philox_counter(offset >> 2), static_cast<uint32_t>(seed),
                                 static_cast<uint32_t>(seed >> 32));
  return static_cast<int64_t>(r.y);
}

// A fused chain's next link, as the SSU kernels' extra block stores it: the stock draw that
// follows the call's position (its seed, its offset + 4), the position being the device
// generator state's (gen_seed, *gen_offset + seed_offset) when gen_seed is given, else
// (generator_seed, seed_offset).
__device__ __forceinline__ void store_next_link(int64_t *seed_next, const uint64_t *gen_seed,
                                                const uint64_t *gen_offset,
                                                uint64_t generator_seed, uint64_t seed_offset) {
  uint64_t seed = generator_seed, offset = seed_offset;
  if (gen_seed != nullptr) {
    seed = *gen_seed;
    offset += *gen_offset;
  }
  *seed_next = torch_seed_draw(seed, offset + 4);
}

}  // namespace mamba_ssu
