// philox_words.cuh — the stochastic-rounding random words of the state elements, in FlashInfer's
// single-token mapping: Philox4x32 with R rounds (philox.cuh), key (lo(seed), hi(seed)), counter
// (lo(o), hi(o), 0, 0) for a 64-bit element offset o; an element takes the low 13 bits of its word.
// Column n of row d of a head takes word (n mod G) of the call at
//   o = slot * state stride + h * dim * dstate + d * dstate + G * floor(n / G)
// (slot: the READ slot), with G = 4 for the "simple" layout (fp16, dstate 128 and 256; 2 at
// dstate 64) and 2 for "vertical" (the config's sr_group()).
// Holds the generic per-row form (sr_words, any config), and the pieces of the hot kernels'
// faster forms of the same words: a key schedule computed once and read back from shared
// memory (KeySchedule, store_key_schedule, load_key_schedule), the rounds over it
// (philox_scheduled), and calls whose counters share one high word, so that round 2's first
// product is computed once per warp (PhiloxRoundTwo, philox_round_two, philox_from_lo).
// Included by ssu.cuh (HotConfig, the body); a second SSU kernel includes it for the key schedule
// and the rounds over it, and for sr_words where its mapping is this one.
#pragma once

#include <stdint.h>

#include "loads.cuh"
#include "philox.cuh"

namespace mamba_ssu {
namespace ssu {

// The key words of every round of a Philox call: round r takes (k0[r], k1[r]) =
// (lo(seed) + r * W0, hi(seed) + r * W1).
template <int kRounds>
struct KeySchedule {
  uint32_t k0[kRounds], k1[kRounds];
};

// Round t's key words of seed into a table of 2 * kRounds words (k0 words first) when
// t < kRounds: called by the threads that share the table, t being each one's index there, who
// then synchronise before load_key_schedule.
template <int kRounds>
__device__ __forceinline__ void store_key_schedule(uint32_t *table, int t, uint64_t seed) {
  if (t < kRounds) {
    table[t] = static_cast<uint32_t>(seed) + static_cast<uint32_t>(t) * kPhiloxW0;
    table[kRounds + t] =
        static_cast<uint32_t>(seed >> 32) + static_cast<uint32_t>(t) * kPhiloxW1;
  }
}

// The schedule from a shared-memory table (store_key_schedule). Left to itself the compiler
// re-derives the per-round key words (2 adds per round) at every call; the volatile loads make
// them opaque, so they are loaded once. From a table at a fixed shared address (the same for
// all threads of a block) the compiler keeps the key words in uniform registers.
template <int kRounds>
__device__ __forceinline__ KeySchedule<kRounds> load_key_schedule(const uint32_t *table) {
  KeySchedule<kRounds> k;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    k.k0[r] = load_shared_volatile(table + r);
    k.k1[r] = load_shared_volatile(table + kRounds + r);
  }
  return k;
}

// Philox4x32 with kRounds rounds (0: the counter unchanged) over a schedule of at least kRounds
// rounds.
template <int kRounds, int kN>
__device__ __forceinline__ U32x4 philox_scheduled(U32x4 c, const KeySchedule<kN> &k) {
#pragma unroll
  for (int r = 0; r < kRounds; ++r) c = philox_round(c, k.k0[r], k.k1[r]);
  return c;
}

// Philox of counter (lo, hi, 0, 0) for a high word hi that is the same for many calls (a lane's
// counters over a warp's rows, while they do not cross a multiple of 2^32). Round 1 gives
// (hi ^ k0[0], 0, z1, w1) with (z1 ^ k1[0], w1) the product M0 * lo, and round 2's first
// product M0 * (hi ^ k0[0]) depends on hi alone: philox_round_two computes it once, and
// philox_from_lo each call from it, which saves a wide multiply, an XOR and the 64-bit
// counter's carry per call. kRounds >= 2.
struct PhiloxRoundTwo {
  uint32_t z_xor;  // hi(M0 * (hi ^ k0[0])) ^ k1[1]
  uint32_t w;      // lo(M0 * (hi ^ k0[0]))
};
template <int kRounds, int kN>
__device__ __forceinline__ PhiloxRoundTwo philox_round_two(uint32_t hi, const KeySchedule<kN> &k) {
  const uint32_t x1 = hi ^ k.k0[0];
  return PhiloxRoundTwo{__umulhi(kPhiloxM0, x1) ^ k.k1[kRounds > 1 ? 1 : 0], kPhiloxM0 * x1};
}
template <int kRounds, int kN>
__device__ __forceinline__ U32x4 philox_from_lo(uint32_t lo, const KeySchedule<kN> &k,
                                                const PhiloxRoundTwo &t) {
  const uint32_t hi0 = __umulhi(kPhiloxM0, lo);
  const uint32_t lo0 = kPhiloxM0 * lo;
  const uint32_t z1 = hi0 ^ k.k1[0];
  const uint32_t hi1 = __umulhi(kPhiloxM1, z1);
  const uint32_t lo1 = kPhiloxM1 * z1;
  U32x4 c{hi1 ^ k.k0[kRounds > 1 ? 1 : 0], lo1, t.z_xor ^ lo0, t.w};
#pragma unroll
  for (int r = 2; r < kRounds; ++r) c = philox_round(c, k.k0[r], k.k1[r]);
  return c;
}

// The stochastic-rounding random words of one state row at this lane's columns: column n
// takes word (n mod G) of Philox(counter = the Philox element offset of the first column of its
// group of G); a lane's G consecutive elements are one group. sr_lane is the offset of the
// lane's first column, col(lane, 0); the other groups are at fixed distances from it.
// Cfg: a config of ssu.cuh (kMaxCols, ncols(), sr_group(), col(lane, i), Key, philox(c, key)).
template <class Cfg>
__device__ __forceinline__ void sr_words(const Cfg &cfg, const typename Cfg::Key &key,
                                         uint64_t sr_lane, int lane,
                                         uint32_t (&rnd)[Cfg::kMaxCols]) {
  constexpr int K = Cfg::kMaxCols;
#pragma unroll
  for (int i = 0; i < K; i += 2) {
    if (i < cfg.ncols() && i % cfg.sr_group() == 0) {
      const uint32_t dist = static_cast<uint32_t>(cfg.col(lane, i) - cfg.col(lane, 0));
      const U32x4 w = cfg.philox(philox_counter(sr_lane + dist), key);
      rnd[i] = w.x;
      rnd[i + 1] = w.y;
      if (i + 3 < K && cfg.sr_group() == 4) {
        rnd[i + 2] = w.z;
        rnd[i + 3] = w.w;
      }
    }
  }
}

}  // namespace ssu
}  // namespace mamba_ssu
