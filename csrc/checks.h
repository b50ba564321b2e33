// checks.h — host-side pieces shared by the contract check (contract.cu), the parameter-block
// checks and launchers of the single- and multi-token SSU (ssu.cu, ssu_mtp_check.cu,
// ssu_mtp.cu): dtype sizes, pointer, stride and index checks, the seed of a call (its one
// check, its conversion from a deprecated parameter block's flat fields, its lowering into the
// kernels' argument structs), and the SM count of the current device.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <limits>

#include "common.cuh"

namespace mamba_ssu {

inline bool is_float_dtype(int32_t t) {
  return t == MAMBA_SSU_F32 || t == MAMBA_SSU_F16 || t == MAMBA_SSU_BF16;
}
inline int float_bytes(int32_t t) { return t == MAMBA_SSU_F32 ? 4 : 2; }
inline int index_bytes(int32_t t) { return t == MAMBA_SSU_I64 ? 8 : 4; }

inline long long ll(int64_t v) { return static_cast<long long>(v); }
// A 128-bit value for a message, saturated at LLONG_MAX.
inline long long ll128(__int128 v) {
  return v > std::numeric_limits<long long>::max() ? std::numeric_limits<long long>::max()
                                                   : static_cast<long long>(v);
}

inline int invalid(const char *fmt, long long a) {
  return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, fmt, a);
}

// Whether FlashInfer's sm_90 module builds at this dstate (check_dstate's rule below: multiples
// of 32 from 64 with a 2-byte state, of 16 from 32 with an fp32 one).
inline bool flashinfer_takes_dstate(int64_t dstate, int32_t state_dtype) {
  return state_dtype == MAMBA_SSU_F32 ? dstate >= 32 && dstate % 16 == 0
                                      : dstate >= 64 && dstate % 32 == 0;
}

// The dstate rule of FlashInfer's sm_90 module (0.7.2.post1 and 0.7.4 alike; docs/flashinfer-ssu.md,
// "Shapes FlashInfer takes on sm_90"). Its JIT module instantiates every kernel of both paths,
// so a dstate one of them cannot take fails the module's build (a RuntimeError for the caller):
// the horizontal kernel's stage is 64 bytes of a row (dstate a multiple of 32 columns of a 2-byte
// state, 16 of an fp32 one), the vector width min(16 / sizeof(state), dstate / 32) must be >= 1,
// and the multi-token kernel's register tiles (the next power of two of dstate over 8 lanes, in
// 8-column blocks of a 2-byte state) must hold one block. Served here: 64, 128 and 256, and the
// other multiples of 32 up to 512 (96, 160, 192, 224; above 256, long_dstate); with an fp32
// state also the multiples of 16 from 32 to 512 but 112 (uneven_dstate: the generic kernels of
// ssu_uneven.cu; single token the simple, vertical and horizontal mappings, multi token the
// run-time kernel; above 256 check_long_dstate's rules too). At 112 FlashInfer's simple kernel
// runs 3-column runs past each row's end (the last one reads B and C past their shared arrays
// and reads and writes two columns of the next row, racing with that row's warp): its result is
// not defined, so UNSUPPORTED (docs/flashinfer-ssu.md, "What the crate does not match yet").
// Above 512 FlashInfer's module still builds; the crate's kernels stop there (UNSUPPORTED).
// Returns MAMBA_SSU_SUCCESS, UNSUPPORTED (FlashInfer takes the dstate, this crate does not yet) or
// INVALID_ARGUMENT (FlashInfer's build refuses it), with the detail set.
inline int check_dstate(int64_t dstate, int32_t state_dtype) {
  const bool wide = state_dtype == MAMBA_SSU_F32;
  if (dstate >= 64 && dstate <= 512 && dstate % 32 == 0) return MAMBA_SSU_SUCCESS;
  if (wide && dstate >= 32 && dstate <= 512 && dstate % 16 == 0 && dstate != 112)
    return MAMBA_SSU_SUCCESS;
  if (wide && dstate == 112)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                "dstate: 112 with an fp32 state is not served (FlashInfer's simple kernel reads "
                "and writes two columns past each row there, an undefined result)");
  if (flashinfer_takes_dstate(dstate, state_dtype))
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                "dstate: expected a multiple of 32 from 64 to 512 (of 16 from 32 with an fp32 "
                "state), got %lld (FlashInfer's sm_90 kernels take it; not served yet)",
                ll(dstate));
  return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
              "dstate: expected a multiple of %d from %d (FlashInfer's sm_90 kernels with %s "
              "state), got %lld",
              wide ? 16 : 32, wide ? 32 : 64, wide ? "an fp32" : "a 2-byte", ll(dstate));
}

// A dstate above 256 (check_dstate takes up to 512): rows longer than the compiled-in kernels'
// and the uneven ones' (single token DynLongConfig, up to 16 columns a lane; the horizontal
// kernel of any stage count; multi token the 512-column tile with the row's length at run time).
inline bool long_dstate(int64_t dstate) { return dstate > 256; }

// The calls above dstate 256 that are not served although FlashInfer's module takes them: an
// int16 block-scaled state on the single-token path at 288 to 480. FlashInfer's simple kernels
// keep a lane's new values of an int16 row in a register array of dstate / 32 floats, which its
// runs of 8 columns (two runs a lane at most, 256 apart) fill exactly at 512 and overrun at the
// other dstates above 256 (lanes 0..3 at 288 store 16 values into 9): an undefined result
// (docs/flashinfer-ssu.md, "An int16 state above dstate 256"). At 512 the single-token kernel
// DynLongI16Config serves it; the multi-token kernel keeps the row in its 512-column tile at
// every dstate above 256 (mtp_kernel_i16<kMtpLongRows>), so `multi_token` calls pass.
// UNSUPPORTED; MAMBA_SSU_SUCCESS otherwise.
inline int check_long_dstate(int64_t dstate, int32_t state_dtype, bool multi_token) {
  if (long_dstate(dstate) && state_dtype == MAMBA_SSU_I16 && !multi_token && dstate != 512)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                "dstate: a single-token I16 state above 256 is served at 512 only, got %lld "
                "(FlashInfer's simple kernel writes past its lanes' register array of new values "
                "there, an undefined result)",
                ll(dstate));
  return MAMBA_SSU_SUCCESS;
}

// An explicit VERTICAL at a dstate above 256 that FlashInfer's module builds at: FlashInfer's
// vertical kernel loads a state row as one TMA box, which holds at most 256 elements, and its
// launcher refuses the call ("Failed to initialize the TMA descriptor", a RuntimeError; recorded
// on an H100 with 0.7.2.post1 for 2-byte and fp32 states at 272 to 512: docs/flashinfer-ssu.md,
// "What the crate does not match yet"). INVALID_ARGUMENT, checked before check_dstate's
// UNSUPPORTED for the other mappings there. AUTO, which FlashInfer sends to that kernel above its
// switch, stays with check_dstate (the switch depends on the device; the checks do not).
inline int check_vertical_dstate(int64_t dstate, int32_t state_dtype, bool vertical) {
  if (vertical && dstate > 256 && flashinfer_takes_dstate(dstate, state_dtype))
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "dstate: VERTICAL takes at most 256 (FlashInfer's vertical kernel loads a row as "
                "one TMA box of at most 256 elements, and its launcher refuses the call), got %lld",
                ll(dstate));
  return MAMBA_SSU_SUCCESS;
}

// A dstate check_dstate took other than 64, 128 and 256 (96, 160, 192, 224; with an fp32 state
// also 32, 48, 80, 144, 176, 208, 240): FlashInfer's lane runs there are not the compiled-in
// kernels' (single token) and its multi-token tile spans more columns than the row; served by
// the generic kernels of ssu_uneven.cu on every path.
inline bool uneven_dstate(int64_t dstate) {
  return dstate != 64 && dstate != 128 && dstate != 256;
}

// An int16 state under the VERTICAL mapping at a dstate whose last 64-column block is partial
// (96, 160, 224): FlashInfer's vertical kernel (0.7.2.post1 and 0.7.4 alike) stores and reads the
// odd columns of that block one element past the end of its per-lane register array of new
// values, an undefined result (recorded on an H200 as -32767 in those columns;
// docs/flashinfer-ssu.md, "An int16 state at the uneven dstates"): UNSUPPORTED rather than that
// state or other bits than FlashInfer's.
inline int check_i16_vertical(int64_t dstate, int32_t state_dtype, bool vertical) {
  if (state_dtype == MAMBA_SSU_I16 && vertical && dstate % 64 != 0)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                "algorithm: VERTICAL with an I16 state at dstate %lld is not served (FlashInfer's "
                "vertical kernel indexes past a register array for the odd columns of the row's "
                "last, partial 64-column block there, an undefined result; SIMPLE serves it)",
                ll(dstate));
  return MAMBA_SSU_SUCCESS;
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

// A stride that must not be negative.
inline int check_nonneg(int64_t stride, const char *name) {
  if (stride < 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "%s: expected >= 0, got %lld", name,
                ll(stride));
  return MAMBA_SSU_SUCCESS;
}

// A stride (elements of `bytes` bytes) of a tensor whose base is 16-byte aligned: >= min_stride
// and a multiple of 16 bytes.
inline int check_stride16(int64_t stride, const char *name, int bytes, __int128 min_stride) {
  if (stride < min_stride)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "%s: expected >= %lld, got %lld", name,
                ll128(min_stride), ll(stride));
  if ((static_cast<__int128>(stride) * bytes) % 16 != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "%s: expected a multiple of %d (16-byte alignment), got %lld", name, 16 / bytes,
                ll(stride));
  return MAMBA_SSU_SUCCESS;
}

// An optional index tensor (idx == nullptr: absent): aligned to the index size, its stride
// >= 0.
inline int check_index(const void *idx, const char *name, int32_t dtype, int64_t stride,
                       const char *stride_name) {
  if (idx == nullptr) return MAMBA_SSU_SUCCESS;
  if (!aligned(idx, index_bytes(dtype)))
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "%s: expected a %d-byte aligned pointer", name,
                index_bytes(dtype));
  return check_nonneg(stride, stride_name);
}

// The dtype a multi-token block's num_accepted_tokens or cu_seqlens has: its own field, or (0)
// index_dtype.
inline int32_t own_index_dtype(int32_t field, int32_t index_dtype) {
  return field == 0 ? index_dtype : field;
}

// ---------------------------------------------------------------------------------------------
// The seed of a call (mamba_ssu_seed), the same for both forms.

// The Philox rounds a checked seed runs: 0 (round to nearest) without a seed.
inline int32_t seed_rounds(const mamba_ssu_seed &s) {
  return s.mode == MAMBA_SSU_SEED_MODE_NONE ? 0 : s.rounds;
}

// The names a seed's rejections use: the arguments of the caller's interface (mamba_ssu_args'
// seed, or a deprecated parameter block's flat fields) and, where one argument holds several
// fields, the field's name within it ("" or e.g. "offset_ptr ").
struct SeedNames {
  const char *mode, *rounds, *rule, *pointer, *next;
  const char *seed_ptr, *offset_ptr, *offset;
  const char *seed_ptr_field, *offset_ptr_field, *offset_field;
};

// The names of mamba_ssu_args' seed (FlashInfer's philox_rounds; the crate's sr_rule).
constexpr SeedNames kSeedNames{"seed.mode",     "philox_rounds",  "sr_rule",
                               "seed.pointer",  "seed.next",      "seed.position",
                               "seed.position", "seed.position",  "seed_ptr: ",
                               "offset_ptr: ",  "offset: "};

// The option values of a seed (FlashInfer's Python checks them before any tensor rule, so the
// contract runs this first): the mode, the rule and the reserved field in their sets, and with
// a seed (mode POINTER or DERIVED) rounds >= 1 (FlashInfer sets no upper bound; the generic
// kernels loop over any count).
inline int check_seed_values(const mamba_ssu_seed &s, const SeedNames &n) {
  if (s.mode != MAMBA_SSU_SEED_MODE_NONE && s.mode != MAMBA_SSU_SEED_MODE_POINTER &&
      s.mode != MAMBA_SSU_SEED_MODE_DERIVED)
    return reject(MAMBA_SSU_ERROR_INVALID_VALUE, n.mode,
                  "expected NONE (0), POINTER (1) or DERIVED (2), got %d", s.mode);
  if (s.rule != MAMBA_SSU_SR_V072 && s.rule != MAMBA_SSU_SR_V074)
    return reject(MAMBA_SSU_ERROR_INVALID_VALUE, n.rule, "expected V072 (0) or V074 (1), got %d",
                  s.rule);
  if (s.reserved != 0)
    return reject(MAMBA_SSU_ERROR_INVALID_VALUE, "seed.reserved", "expected 0, got %d",
                  s.reserved);
  if (s.mode != MAMBA_SSU_SEED_MODE_NONE && s.rounds < 1)
    return reject(MAMBA_SSU_ERROR_INVALID_VALUE, n.rounds, "expected >= 1 with a seed, got %d",
                  s.rounds);
  return MAMBA_SSU_SUCCESS;
}

// The one check of a seed, for both forms, in this order: its option values
// (check_seed_values); with a seed an F16 state; the position's device pointers (both or
// neither, 8-byte aligned) whenever one is given; `next` 8-byte aligned; a position that is
// read (mode DERIVED, or `next` set: its offset + 4 is the next link) an offset that is a
// multiple of 4 (torch counts 32-bit words in blocks of 4); with mode POINTER an 8-byte aligned
// pointer. `chain` is not read.
inline int check_seed(const mamba_ssu_seed &s, int32_t state_dtype, const SeedNames &n) {
  int st;
  if ((st = check_seed_values(s, n))) return st;
  // FlashInfer's kernels assert an fp16 state for stochastic rounding at compile time: its
  // build fails (a RuntimeError), so this is INVALID_ARGUMENT.
  if (s.mode != MAMBA_SSU_SEED_MODE_NONE && state_dtype != MAMBA_SSU_F16)
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, n.rounds,
                  "stochastic rounding (%d rounds) needs an F16 state (FlashInfer's build refuses "
                  "it for any other), got state_dtype %d",
                  s.rounds, state_dtype);
  const mamba_ssu_position &pos = s.position;
  auto device_word = [](const int64_t *ptr, const char *name, const char *field) {
    if (ptr == nullptr)
      return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, name,
                    "%snull pointer (a device position has both pointers)", field);
    if (!aligned(ptr, 8))
      return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, name, "%sexpected a 8-byte aligned pointer",
                    field);
    return static_cast<int>(MAMBA_SSU_SUCCESS);
  };
  if (pos.seed_ptr != nullptr || pos.offset_ptr != nullptr) {
    if ((st = device_word(pos.seed_ptr, n.seed_ptr, n.seed_ptr_field))) return st;
    if ((st = device_word(pos.offset_ptr, n.offset_ptr, n.offset_ptr_field))) return st;
  }
  if (s.next != nullptr && (st = check_pointer(s.next, n.next, 8))) return st;
  if ((s.mode == MAMBA_SSU_SEED_MODE_DERIVED || s.next != nullptr) && pos.offset % 4 != 0) {
    if (s.next != nullptr)
      return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, n.offset,
                    "%sexpected a multiple of 4 (%s is set), got %llu", n.offset_field, n.next,
                    static_cast<unsigned long long>(pos.offset));
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, n.offset,
                  "%sexpected a multiple of 4, got %llu", n.offset_field,
                  static_cast<unsigned long long>(pos.offset));
  }
  if (s.mode == MAMBA_SSU_SEED_MODE_POINTER && (st = check_pointer(s.pointer, n.pointer, 8)))
    return st;
  return MAMBA_SSU_SUCCESS;
}

// The seed of a deprecated parameter block (mamba_ssu_params or mamba_ssu_mtp_params: the same
// flat fields), converted once at its entry point, and the names its rejections use. Checks
// what only the flat fields can get wrong, with their historical status and names: the enums
// (seed_source, philox_rounds >= 0, sr_rule, with or without stochastic rounding), the device
// generator state given twice (the struct and torch's pair), a FROM_GENERATOR seed without
// one. Then: philox_rounds 0 is mode NONE; POINTER mode POINTER; FROM_GENERATOR and
// FROM_VALUES mode DERIVED. The position is the device state (the pair, or the struct's two
// fields) where one is given, else the values (generator_seed, seed_offset); a FROM_VALUES
// seed's position is always the values (its seed, and its next link, are the values' draws).
template <class P>
int legacy_seed(const P &p, mamba_ssu_seed *out, SeedNames *names) {
  if (p.seed_source != MAMBA_SSU_SEED_POINTER && p.seed_source != MAMBA_SSU_SEED_FROM_GENERATOR &&
      p.seed_source != MAMBA_SSU_SEED_FROM_VALUES)
    return invalid(
        "seed_source: expected POINTER (0), FROM_GENERATOR (1) or FROM_VALUES (2), got %lld",
        ll(p.seed_source));
  if (p.philox_rounds < 0)
    return invalid("philox_rounds: expected >= 0, got %lld", ll(p.philox_rounds));
  if (p.sr_rule != MAMBA_SSU_SR_V072 && p.sr_rule != MAMBA_SSU_SR_V074)
    return invalid("sr_rule: expected V072 (0) or V074 (1), got %lld", ll(p.sr_rule));
  const bool has_pair = p.generator_seed_ptr != nullptr || p.generator_offset_ptr != nullptr;
  if (has_pair && p.generator_state != nullptr)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "generator_seed_ptr/generator_offset_ptr: not allowed together with "
                "generator_state");
  const bool sr = p.philox_rounds > 0;
  if (sr && p.seed_source == MAMBA_SSU_SEED_FROM_GENERATOR && !has_pair &&
      p.generator_state == nullptr)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "generator_state: null pointer");

  mamba_ssu_seed s{};
  s.mode = !sr                                      ? MAMBA_SSU_SEED_MODE_NONE
           : p.seed_source == MAMBA_SSU_SEED_POINTER ? MAMBA_SSU_SEED_MODE_POINTER
                                                     : MAMBA_SSU_SEED_MODE_DERIVED;
  s.rounds = p.philox_rounds;
  s.rule = p.sr_rule;
  s.pointer = p.rand_seed;
  s.next = p.seed_next;
  s.position.seed = p.generator_seed;
  s.position.offset = p.seed_offset;
  const bool values = sr && p.seed_source == MAMBA_SSU_SEED_FROM_VALUES;
  *names = SeedNames{"seed_source",  "philox_rounds", "sr_rule", "rand_seed",
                     "seed_next",    "generator_seed_ptr",     "generator_offset_ptr",
                     "seed_offset",  "",              "",        ""};
  if (!values && has_pair) {
    s.position.seed_ptr = p.generator_seed_ptr;
    s.position.offset_ptr = p.generator_offset_ptr;
  } else if (!values && p.generator_state != nullptr) {
    // The struct's two fields (seed, then offset), as int64 words.
    const uintptr_t base = reinterpret_cast<uintptr_t>(p.generator_state);
    s.position.seed_ptr = reinterpret_cast<const int64_t *>(base);
    s.position.offset_ptr = reinterpret_cast<const int64_t *>(base + sizeof(uint64_t));
    names->seed_ptr = "generator_state";
    names->offset_ptr = "generator_state";
  }
  *out = s;
  return MAMBA_SSU_SUCCESS;
}

// The lowering of a checked seed into a kernel's argument struct (ssu::Args, the multi-token
// kernel's struct: the same seed fields): the kernel's seed source, the seed pointer, the
// position (device state words or values), the next link, the rounds and the SR rule.
template <class A>
void lower_seed(const mamba_ssu_seed &s, A *a) {
  const bool device_position = s.position.seed_ptr != nullptr;
  a->seed_source = s.mode == MAMBA_SSU_SEED_MODE_DERIVED
                       ? (device_position ? MAMBA_SSU_SEED_FROM_GENERATOR
                                          : MAMBA_SSU_SEED_FROM_VALUES)
                       : MAMBA_SSU_SEED_POINTER;
  a->rand_seed = s.mode == MAMBA_SSU_SEED_MODE_POINTER ? s.pointer : nullptr;
  a->gen_seed = reinterpret_cast<const uint64_t *>(s.position.seed_ptr);
  a->gen_offset = reinterpret_cast<const uint64_t *>(s.position.offset_ptr);
  a->seed_offset = s.position.offset;
  a->generator_seed = s.position.seed;
  a->seed_next = s.next;
  a->philox_rounds = seed_rounds(s);
  a->sr_rule = s.rule;
}

// The seed fields a parameter block's planning reads (rounds, rule, next link), set from a
// checked seed (the contract's lowering fills its internal parameter block with them).
template <class P>
void plan_seed_fields(const mamba_ssu_seed &s, P *p) {
  p->philox_rounds = seed_rounds(s);
  p->sr_rule = s.rule;
  p->seed_next = s.next;
}

// The GPU a launch is planned for (device.cu): its properties and what planning derives from
// them.
// planning_props: `given` > 0: the sm_90 family's limits with `given` SMs (no device touched);
// else the current device's (queried once per device, cached).
int planning_props(int32_t given, mamba_ssu_device_props *out);
// launch_props: the current device's, with num_sms replaced by `given` when positive.
int launch_props(int32_t given, mamba_ssu_device_props *out);
// Every count >= 1 and reserved 0 (MAMBA_SSU_ERROR_INVALID_ARGUMENT, naming "props").
int check_props(const mamba_ssu_device_props *d);
// Blocks of `threads` threads using `smem` bytes of shared memory that stay resident on one SM
// of d: a kernel's register floor `floor` (its __launch_bounds__ minimum, which holds on a
// 65536-register SM) bounded by d's blocks, threads, registers and shared memory per SM; >= 1.
int resident_blocks(const mamba_ssu_device_props &d, int floor, int threads, int64_t smem);
// A warps-per-SM threshold of tuning.h (measured on the H200's 64 warp slots per SM) for d's
// warp slots per SM: the same fraction of them.
int64_t scaled_warps(const mamba_ssu_device_props &d, int64_t warps);

}  // namespace mamba_ssu
