// checks.h — host-side pieces shared by the contract checks and launchers of the single- and
// multi-token SSU (ssu.cu, ssu_mtp_check.cu, ssu_mtp.cu): dtype sizes, pointer checks, the seed
// fields' check (the two parameter blocks carry the same seed fields with the same meaning),
// the device generator state they name, and the SM count of the current device.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common.cuh"

namespace mamba_ssu {

inline bool is_float_dtype(int32_t t) {
  return t == MAMBA_SSU_F32 || t == MAMBA_SSU_F16 || t == MAMBA_SSU_BF16;
}
inline int float_bytes(int32_t t) { return t == MAMBA_SSU_F32 ? 4 : 2; }
inline int index_bytes(int32_t t) { return t == MAMBA_SSU_I64 ? 8 : 4; }

inline long long ll(int64_t v) { return static_cast<long long>(v); }

inline int invalid(const char *fmt, long long a) {
  return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, fmt, a);
}

inline bool aligned(const void *p, size_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

// A non-null pointer aligned to `align` bytes.
inline int check_pointer(const void *p, const char *name, size_t align) {
  if (p == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "%s: null pointer", name);
  if (!aligned(p, align))
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "%s: expected a %zu-byte aligned pointer",
                name, align);
  return MAMBA_SSU_SUCCESS;
}

// The seed fields of a parameter block (mamba_ssu_params or mamba_ssu_mtp_params), checked in
// this order: the device generator state is the struct or torch's pair of separate values
// (both or neither), never both forms; a fused chain's next link (seed_next) needs an aligned
// pointer and an offset that is a multiple of 4; with stochastic rounding the seed source's
// own fields (rand_seed, or the generator state and a multiple-of-4 offset). The seed matters
// only with stochastic rounding (seed_source's value is checked by the caller).
template <class P>
int check_seed_fields(const P &p) {
  int s;
  const bool has_pair = p.generator_seed_ptr != nullptr || p.generator_offset_ptr != nullptr;
  if (has_pair) {
    if (p.generator_state != nullptr)
      return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                  "generator_seed_ptr/generator_offset_ptr: not allowed together with "
                  "generator_state");
    if ((s = check_pointer(p.generator_seed_ptr, "generator_seed_ptr", 8))) return s;
    if ((s = check_pointer(p.generator_offset_ptr, "generator_offset_ptr", 8))) return s;
  }
  if (p.seed_next != nullptr) {
    if ((s = check_pointer(p.seed_next, "seed_next", 8))) return s;
    if (p.generator_state != nullptr &&
        (s = check_pointer(p.generator_state, "generator_state", 8)))
      return s;
    if (p.seed_offset % 4 != 0)
      return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                  "seed_offset: expected a multiple of 4 (seed_next is set), got %llu",
                  static_cast<unsigned long long>(p.seed_offset));
  }
  if (p.philox_rounds > 0) {
    if (p.seed_source == MAMBA_SSU_SEED_POINTER) {
      if ((s = check_pointer(p.rand_seed, "rand_seed", 8))) return s;
    } else {
      if (p.seed_source == MAMBA_SSU_SEED_FROM_GENERATOR && !has_pair &&
          (s = check_pointer(p.generator_state, "generator_state", 8)))
        return s;
      // Torch's offsets count 32-bit words in blocks of 4.
      if (p.seed_offset % 4 != 0)
        return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                    "seed_offset: expected a multiple of 4, got %llu",
                    static_cast<unsigned long long>(p.seed_offset));
    }
  }
  return MAMBA_SSU_SUCCESS;
}

// The device generator state a (checked) parameter block names, as the kernels read it: its
// seed and offset words (both nullptr when it names none).
template <class P>
void generator_words(const P &p, const uint64_t **seed, const uint64_t **offset) {
  *seed = nullptr;
  *offset = nullptr;
  if (p.generator_seed_ptr != nullptr) {
    *seed = reinterpret_cast<const uint64_t *>(p.generator_seed_ptr);
    *offset = reinterpret_cast<const uint64_t *>(p.generator_offset_ptr);
  } else if (p.generator_state != nullptr) {
    *seed = &p.generator_state->seed;
    *offset = &p.generator_state->offset;
  }
}

// `given` when positive, else the current device's SM count.
int device_num_sms(int32_t given, int *out);

}  // namespace mamba_ssu
