// contract.cu — mamba_ssu_check / mamba_ssu_launch / mamba_ssu_plan: one SSU call in
// FlashInfer's terms (tensor descriptors, FlashInfer's options, one mamba_ssu_seed), checked
// once for both forms and lowered onto the single- or multi-token parameter block.
//
// What is written here: FlashInfer's Python checks first (the option values and conflicts,
// INVALID_VALUE: its ValueError; the seed's values through checks.h's check_seed_values), then
// the form (FlashInfer 0.7.2's Python rule) and its normalisation of ranks, the tensors' ranks,
// sizes, dtypes and inner strides, the index tensors' shapes and dtypes (FlashInfer's: padded
// tensors, num_accepted_tokens and cu_seqlens of their own dtype), the arguments the
// single-token form ignores, cache_steps (the C++ checks, INVALID_ARGUMENT: its RuntimeError).
// What is not: the rules of the parameter blocks (sizes and their ranges, dstate, pointer
// alignment, 16-byte stride multiples, extents, grid bounds, output rows that must not overlap,
// write modes) and of the seed (checks.h: check_seed) are checked once, by ssu_check /
// mtp_check, after the lowering; their errors are renamed to the tensor they concern.
// A pure host function up to the launch: no device is touched with num_sms > 0 or with the
// device properties given (mamba_ssu_plan_for_device).
#include <cstring>
#include <limits>

#include "checks.h"
#include "common.cuh"
#include "launch.h"

namespace mamba_ssu {
namespace {

constexpr int kMaxRank = MAMBA_SSU_MAX_RANK;

const char *dtype_name(int32_t t) {
  switch (t) {
    case MAMBA_SSU_F32: return "F32";
    case MAMBA_SSU_F16: return "F16";
    case MAMBA_SSU_BF16: return "BF16";
    case MAMBA_SSU_I32: return "I32";
    case MAMBA_SSU_I64: return "I64";
    case MAMBA_SSU_I16: return "I16";
    default: return "an untagged dtype";
  }
}

bool known_dtype(int32_t t) {
  return is_float_dtype(t) || t == MAMBA_SSU_I32 || t == MAMBA_SSU_I64 || t == MAMBA_SSU_I16;
}
bool is_index_dtype(int32_t t) { return t == MAMBA_SSU_I32 || t == MAMBA_SSU_I64; }

// a * b for a, b >= 0, saturated at INT64_MAX (a dense stride of sizes the parameter-block
// check will reject anyway must not overflow).
int64_t mul_sat(int64_t a, int64_t b) {
  const __int128 r = static_cast<__int128>(a) * b;
  return r > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max()
                                                  : static_cast<int64_t>(r);
}

// A tensor argument under its FlashInfer name, after the normalisation (rank 0: absent).
struct View {
  const char *name = "";
  const void *data = nullptr;
  int32_t dtype = 0;
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  bool present() const { return rank > 0; }
};

View view_of(const mamba_ssu_tensor &t, const char *name) {
  View v;
  v.name = name;
  v.data = t.data;
  v.dtype = t.dtype;
  v.rank = t.rank;
  for (int k = 0; k < t.rank && k < kMaxRank; ++k) {
    v.shape[k] = t.shape[k];
    v.strides[k] = t.strides[k];
  }
  return v;
}

// FlashInfer's unsqueeze(k) of a present tensor of rank < kMaxRank: a new dimension of size 1
// (whose stride is never read).
void unsqueeze(View *v, int k) {
  for (int i = v->rank; i > k; --i) {
    v->shape[i] = v->shape[i - 1];
    v->strides[i] = v->strides[i - 1];
  }
  v->shape[k] = 1;
  v->strides[k] = 0;
  v->rank++;
}

// The stride of dimension k where it has more than one element, else `dense` (a size-1
// dimension's stride carries no meaning).
int64_t outer(const View &v, int k, int64_t dense) { return v.shape[k] > 1 ? v.strides[k] : dense; }

// ---------------------------------------------------------------------------------------------
// Rules on one tensor (every rejection names it).

// A descriptor the rest can read: rank 0..kMaxRank; present: a tagged dtype, sizes >= 0, and
// (optional tensors) a data pointer, since NULL would not say "absent" (rank 0 does).
int check_descriptor(const mamba_ssu_tensor &t, const char *name, bool optional) {
  if (t.rank < 0 || t.rank > kMaxRank)
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, name,
                  "expected rank 0 (absent) to %d, got %d", kMaxRank, t.rank);
  if (t.rank == 0) return MAMBA_SSU_SUCCESS;
  if (!known_dtype(t.dtype))
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, name,
                  "a dtype the crate has no tag for (dtype %d; F32, F16, BF16, I32, I64 or I16 "
                  "expected)",
                  t.dtype);
  for (int k = 0; k < t.rank; ++k) {
    if (t.shape[k] < 0)
      return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, name, "expected size(%d) >= 0, got %lld",
                    k, ll(t.shape[k]));
  }
  if (optional && t.data == nullptr)
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, name,
                  "null data pointer for a tensor of rank %d (an absent tensor has rank 0)",
                  t.rank);
  return MAMBA_SSU_SUCCESS;
}

int expect_rank(const View &v, int rank, const char *shape) {
  if (v.rank != rank)
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, v.name, "expected %d dimensions %s, got %d",
                  rank, shape, v.rank);
  return MAMBA_SSU_SUCCESS;
}

int expect_size(const View &v, int k, int64_t want, const char *what) {
  if (v.shape[k] != want)
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, v.name,
                  "expected size(%d) == %s (%lld), got %lld", k, what, ll(want),
                  ll(v.shape[k]));
  return MAMBA_SSU_SUCCESS;
}

// stride(k) == want where dimension k has more than one element.
int expect_stride(const View &v, int k, __int128 want, const char *what) {
  if (v.shape[k] > 1 && v.strides[k] != want)
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, v.name,
                  "expected stride(%d) == %s (%lld), got %lld", k, what, ll128(want),
                  ll(v.strides[k]));
  return MAMBA_SSU_SUCCESS;
}

int expect_float(const View &v) {
  if (!is_float_dtype(v.dtype))
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, v.name,
                  "expected dtype F32, F16 or BF16, got %s", dtype_name(v.dtype));
  return MAMBA_SSU_SUCCESS;
}

int expect_dtype(const View &v, int32_t want, const char *why) {
  if (v.dtype != want)
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, v.name, "expected dtype %s (%s), got %s",
                  dtype_name(want), why, dtype_name(v.dtype));
  return MAMBA_SSU_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// The call.

// The tensors of a call, normalised, and what the form rules found.
struct Call {
  View state, x, dt, A, B, C, D, z, dt_bias, out, sbi, dsbi, inter, inter_idx, cu, nat,
      state_scale, inter_scales;
  bool multi = false, varlen = false;
  int64_t batch = 0, ntokens = 1, total_tokens = 0;
  int64_t slots = 0, nheads = 0, dim = 0, dstate = 0, ngroups = 0;
  // The slot indices' dtype (state_batch_indices', else dst_state_batch_indices', else
  // intermediate_state_indices'), and those of num_accepted_tokens and cu_seqlens (each its own).
  int32_t index_dtype = MAMBA_SSU_I32, nat_dtype = MAMBA_SSU_I32, cu_dtype = MAMBA_SSU_I32;
};

// The option values and conflicts (FlashInfer's Python checks), the descriptors, what is not
// served, the form and FlashInfer's normalisation.
int check_options_and_form(const mamba_ssu_args &a, Call *c) {
  int s;
  struct Arg {
    const mamba_ssu_tensor *t;
    const char *name;
    bool optional;
  };
  const Arg all[] = {
      {&a.state, "state", false},
      {&a.x, "x", false},
      {&a.dt, "dt", false},
      {&a.A, "A", false},
      {&a.B, "B", false},
      {&a.C, "C", false},
      {&a.D, "D", true},
      {&a.z, "z", true},
      {&a.dt_bias, "dt_bias", true},
      {&a.out, "out", false},
      {&a.state_batch_indices, "state_batch_indices", true},
      {&a.dst_state_batch_indices, "dst_state_batch_indices", true},
      {&a.intermediate_states, "intermediate_states_buffer", true},
      {&a.intermediate_state_indices, "intermediate_state_indices", true},
      {&a.cu_seqlens, "cu_seqlens", true},
      {&a.num_accepted_tokens, "num_accepted_tokens", true},
      {&a.state_scale, "state_scale", true},
      {&a.intermediate_state_scales, "intermediate_state_scales", true},
  };
  if (a.reserved != 0)
    return reject(MAMBA_SSU_ERROR_INVALID_VALUE, "reserved", "expected 0, got %d", a.reserved);

  // FlashInfer's Python checks (ValueError there, INVALID_VALUE here), in its order and before
  // every tensor rule (a tensor is given when its rank is not 0): the seed with a state_scale,
  // the seed's values (rounds >= 1 with a seed), an intermediate buffer together with dst
  // indices (whatever the form), the algorithm's value.
  const bool seeded = a.seed.mode != MAMBA_SSU_SEED_MODE_NONE;
  if (seeded && a.state_scale.rank > 0)
    return reject(MAMBA_SSU_ERROR_INVALID_VALUE, "state_scale",
                  "not allowed together with a seed (rand_seed): stochastic rounding and a "
                  "block-scaled state exclude each other");
  if ((s = check_seed_values(a.seed, kSeedNames))) return s;
  if (a.intermediate_states.rank > 0 && a.dst_state_batch_indices.rank > 0)
    return reject(MAMBA_SSU_ERROR_INVALID_VALUE, "dst_state_batch_indices",
                  "two write modes at once (intermediate_states_buffer and "
                  "dst_state_batch_indices exclude each other)");
  if (a.algorithm != MAMBA_SSU_ALGO_AUTO && a.algorithm != MAMBA_SSU_ALGO_SIMPLE &&
      a.algorithm != MAMBA_SSU_ALGO_VERTICAL && a.algorithm != MAMBA_SSU_ALGO_HORIZONTAL)
    return reject(MAMBA_SSU_ERROR_INVALID_VALUE, "algorithm",
                  "expected AUTO (0), SIMPLE (1), VERTICAL (2) or HORIZONTAL (3), got %d",
                  a.algorithm);
  if (a.form != MAMBA_SSU_FORM_AUTO && a.form != MAMBA_SSU_FORM_SINGLE &&
      a.form != MAMBA_SSU_FORM_MULTI)
    return reject(MAMBA_SSU_ERROR_INVALID_VALUE, "form",
                  "expected AUTO (0), SINGLE (1) or MULTI (2), got %d", a.form);

  // The descriptors (a tensor of a dtype without a tag, or of a rank no descriptor holds, is
  // FlashInfer's C++ rejection; it passes its Python checks, which only see it given).
  for (const Arg &g : all) {
    if ((s = check_descriptor(*g.t, g.name, g.optional))) return s;
  }

  // The form: FlashInfer's rule on x as given (a negative cache_steps selects nothing).
  const bool has_cu = a.cu_seqlens.rank > 0;
  c->varlen = has_cu && a.x.rank == 3;
  c->multi = c->varlen || a.x.rank == 4 || a.cache_steps >= 1;
  if (a.form == MAMBA_SSU_FORM_SINGLE && c->multi)
    return reject(MAMBA_SSU_ERROR_INVALID_VALUE, "form",
                  "SINGLE asked, but the call is multi-token (a %d-D x, cache_steps %lld%s)",
                  a.x.rank, ll(a.cache_steps), has_cu ? ", cu_seqlens" : "");
  if (a.form == MAMBA_SSU_FORM_MULTI && !c->multi)
    return reject(MAMBA_SSU_ERROR_INVALID_VALUE, "form",
                  "MULTI asked, but the call is single-token (a %d-D x, cache_steps %lld%s): a "
                  "multi-token call has a 4-D x, cache_steps >= 1, or cu_seqlens with a 3-D x",
                  a.x.rank, ll(a.cache_steps), has_cu ? ", cu_seqlens" : "");

  // FlashInfer's horizontal kernel refuses a block-scaled state (its launcher's check, a
  // RuntimeError): rejected as such before the crate's own refusal of that state below.
  if (!c->multi && a.algorithm == MAMBA_SSU_ALGO_HORIZONTAL && a.state_scale.rank > 0)
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "algorithm",
                  "HORIZONTAL does not take a block-scaled int16 state (state_scale): "
                  "FlashInfer's horizontal kernel cannot quantise a row it sees in stages");

  // FlashInfer's arguments this crate does not serve (the single-token path ignores the
  // multi-token ones, intermediate_state_scales included, as FlashInfer's does): decode scales
  // of a state that is not int16 (FlashInfer's block scaling is for an int16 state);
  // intermediate scales without state_scale (FlashInfer's kernel writes none then).
  const bool i16 = a.state.rank > 0 && a.state.dtype == MAMBA_SSU_I16;
  if (c->multi && a.intermediate_state_scales.rank > 0 && a.state_scale.rank == 0)
    return reject(MAMBA_SSU_ERROR_UNSUPPORTED, "intermediate_state_scales",
                  "intermediate scales without state_scale are not served (the buffer of an "
                  "int16 state without scales holds its integers)");
  if (a.state_scale.rank > 0 && a.state.rank > 0 && !i16)
    return reject(MAMBA_SSU_ERROR_UNSUPPORTED, "state_scale",
                  "decode scales with a state of dtype %s are not served (block scaling is for "
                  "an I16 state)",
                  dtype_name(a.state.dtype));
  for (const Arg &g : all) {
    if (!g.optional && g.t->rank == 0)
      return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, g.name,
                    "a required tensor, got none (rank 0)");
  }
  // FlashInfer's C++ checks of the form (RuntimeError there, INVALID_ARGUMENT here). Its
  // multi-token launcher built for sm_90 takes AUTO and SIMPLE only.
  if (c->multi && (a.algorithm == MAMBA_SSU_ALGO_VERTICAL ||
                   a.algorithm == MAMBA_SSU_ALGO_HORIZONTAL))
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "algorithm",
                  "the multi-token path has one layout (AUTO or SIMPLE), got %s",
                  a.algorithm == MAMBA_SSU_ALGO_VERTICAL ? "VERTICAL" : "HORIZONTAL");
  if (has_cu && !c->varlen)
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "cu_seqlens",
                  "the varlen form needs a 3-D x (total_tokens, nheads, dim), got a %d-D x",
                  a.x.rank);
  if (c->multi && a.cache_steps < 0)
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "cache_steps", "expected >= 0, got %lld",
                  ll(a.cache_steps));
  if (c->varlen && a.cache_steps < 1)
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "cache_steps",
                  "the varlen form (cu_seqlens) needs cache_steps >= 1, the longest sequence, "
                  "got %lld",
                  ll(a.cache_steps));

  // FlashInfer's normalisation: one head fewer dimension gets a head dimension of 1; with
  // cache_steps >= 1 outside the varlen form a (batch, nheads, dim)-like tensor gets a token
  // dimension of 1 (each tensor on its own).
  c->state = view_of(a.state, "state");
  c->x = view_of(a.x, "x");
  c->dt = view_of(a.dt, "dt");
  c->A = view_of(a.A, "A");
  c->B = view_of(a.B, "B");
  c->C = view_of(a.C, "C");
  c->D = view_of(a.D, "D");
  c->z = view_of(a.z, "z");
  c->dt_bias = view_of(a.dt_bias, "dt_bias");
  c->out = view_of(a.out, "out");
  c->sbi = view_of(a.state_batch_indices, "state_batch_indices");
  c->dsbi = view_of(a.dst_state_batch_indices, "dst_state_batch_indices");
  c->inter = view_of(a.intermediate_states, "intermediate_states_buffer");
  c->inter_idx = view_of(a.intermediate_state_indices, "intermediate_state_indices");
  c->cu = view_of(a.cu_seqlens, "cu_seqlens");
  c->nat = view_of(a.num_accepted_tokens, "num_accepted_tokens");
  c->state_scale = view_of(a.state_scale, "state_scale");
  c->inter_scales = view_of(a.intermediate_state_scales, "intermediate_state_scales");
  // FlashInfer's Python layer squeezes a trailing size-1 dimension of a 4-D state_scale.
  if (c->state_scale.rank == 4 && c->state_scale.shape[3] == 1) c->state_scale.rank = 3;
  if (!c->multi) {
    // The single-token path ignores the multi-token arguments (FlashInfer's does).
    c->inter = View{};
    c->inter_idx = View{};
    c->nat = View{};
    c->inter_scales = View{};
  }
  if (c->state.rank == 3) unsqueeze(&c->state, 1);
  if (c->A.rank == 2) unsqueeze(&c->A, 0);
  if (c->D.rank == 1) unsqueeze(&c->D, 0);
  if (c->dt_bias.rank == 1) unsqueeze(&c->dt_bias, 0);
  if (!c->varlen) {
    const bool per_token = a.cache_steps >= 1;
    for (View *v : {&c->x, &c->dt, &c->B, &c->C, &c->z, &c->out}) {
      if (v->rank == 2) unsqueeze(v, 1);
      if (per_token && v->rank == 3) unsqueeze(v, 1);
    }
  }
  return MAMBA_SSU_SUCCESS;
}

// state (slots, nheads, dim, dstate): a float dtype, or I16 (FlashInfer's block-scaled state),
// the inner three dims contiguous.
int check_state(Call *c) {
  int s;
  const View &st = c->state;
  if ((s = expect_rank(st, 4, "(slots, nheads, dim, dstate), or 3 (slots, dim, dstate)"))) return s;
  if (st.dtype != MAMBA_SSU_I16 && (s = expect_float(st))) return s;
  c->slots = st.shape[0];
  c->nheads = st.shape[1];
  c->dim = st.shape[2];
  c->dstate = st.shape[3];
  if ((s = expect_stride(st, 3, 1, "1"))) return s;
  if ((s = expect_stride(st, 2, c->dstate, "dstate"))) return s;
  return expect_stride(st, 1, static_cast<__int128>(c->dim) * c->dstate, "dim * dstate");
}

// state_scale (slots, nheads, dim) of an I16 state (a 4-D one with a trailing 1 was squeezed):
// FlashInfer's host wrapper's rules, size(0) == state.size(0), size(1) == nheads, size(2) == dim,
// stride(2) == 1, stride(1) == dim; F32 (FlashInfer compiles the scale type from its dtype, but
// its multi-token kernel writes every scale as float32: the one consistent choice, the only one
// served).
int check_state_scale(const Call &c) {
  int s;
  const View &v = c.state_scale;
  if (!v.present()) return MAMBA_SSU_SUCCESS;
  if ((s = expect_rank(v, 3, "(slots, nheads, dim), or 4 with a trailing 1"))) return s;
  if ((s = expect_size(v, 0, c.slots, "state.size(0)"))) return s;
  if ((s = expect_size(v, 1, c.nheads, "nheads"))) return s;
  if ((s = expect_size(v, 2, c.dim, "dim"))) return s;
  if (v.dtype != MAMBA_SSU_F32)
    return reject(MAMBA_SSU_ERROR_UNSUPPORTED, v.name,
                  "decode scales of dtype %s are not served (F32 expected)", dtype_name(v.dtype));
  if ((s = expect_stride(v, 2, 1, "1"))) return s;
  return expect_stride(v, 1, c.dim, "dim");
}

// intermediate_state_scales (multi token, with state_scale): FlashInfer's host-wrapper rules,
// (batch, cache_steps, nheads, dim) and contiguous; F32 (as state_scale). Required with an int16
// intermediate buffer and scales (FlashInfer's kernel writes the buffer's scales through it: a
// null pointer otherwise); not read without the buffer.
int check_inter_scales(const Call &c, int64_t cache_steps) {
  int s;
  const View &v = c.inter_scales;
  if (!v.present()) {
    if (c.inter.present() && c.state_scale.present())
      return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "intermediate_state_scales",
                    "required with an int16 intermediate_states_buffer and state_scale, got "
                    "none");
    return MAMBA_SSU_SUCCESS;
  }
  if ((s = expect_rank(v, 4, "(batch, cache_steps, nheads, dim)"))) return s;
  if ((s = expect_size(v, 0, c.batch, "batch"))) return s;
  if ((s = expect_size(v, 1, cache_steps, "cache_steps"))) return s;
  if ((s = expect_size(v, 2, c.nheads, "nheads"))) return s;
  if ((s = expect_size(v, 3, c.dim, "dim"))) return s;
  if (v.dtype != MAMBA_SSU_F32)
    return reject(MAMBA_SSU_ERROR_UNSUPPORTED, v.name,
                  "decode scales of dtype %s are not served (F32 expected)", dtype_name(v.dtype));
  const __int128 row = static_cast<__int128>(c.nheads) * c.dim;
  if ((s = expect_stride(v, 3, 1, "1"))) return s;
  if ((s = expect_stride(v, 2, c.dim, "dim"))) return s;
  if ((s = expect_stride(v, 1, row, "nheads * dim"))) return s;
  return expect_stride(v, 0, row * cache_steps, "cache_steps * nheads * dim");
}

// A (nheads, dim, dstate) F32 strides (1, 0, 0); D, dt_bias (nheads, dim) strides (1, 0), the
// dtype of dt.
int check_per_head(const Call &c) {
  int s;
  const View &A = c.A;
  if ((s = expect_rank(A, 3, "(nheads, dim, dstate), or 2 (dim, dstate)"))) return s;
  if ((s = expect_size(A, 0, c.nheads, "nheads"))) return s;
  if ((s = expect_size(A, 1, c.dim, "dim"))) return s;
  if ((s = expect_size(A, 2, c.dstate, "dstate"))) return s;
  if ((s = expect_dtype(A, MAMBA_SSU_F32, "FlashInfer's A is fp32"))) return s;
  if ((s = expect_stride(A, 0, 1, "1"))) return s;
  if ((s = expect_stride(A, 1, 0, "0"))) return s;
  if ((s = expect_stride(A, 2, 0, "0"))) return s;
  for (const View *v : {&c.D, &c.dt_bias}) {
    if (!v->present()) continue;
    if ((s = expect_rank(*v, 2, "(nheads, dim), or 1 (dim,)"))) return s;
    if ((s = expect_size(*v, 0, c.nheads, "nheads"))) return s;
    if ((s = expect_size(*v, 1, c.dim, "dim"))) return s;
    if ((s = expect_dtype(*v, c.dt.dtype, "the dtype of dt"))) return s;
    if ((s = expect_stride(*v, 0, 1, "1"))) return s;
    if ((s = expect_stride(*v, 1, 0, "0"))) return s;
  }
  return MAMBA_SSU_SUCCESS;
}

// The token tensors (x, dt, B, C, z, out): `lead` leading dimensions equal to x's ((batch,)
// single token, (batch, T) fixed length, (total_tokens,) varlen), then two inner ones.
int check_token_tensors(Call *c, int lead) {
  int s;
  const int rank = lead + 2;
  const char *shape = !c->multi ? "(batch, nheads, dim)"
                      : c->varlen ? "(total_tokens, nheads, dim)"
                                  : "(batch, T, nheads, dim)";
  const char *bc_shape = !c->multi ? "(batch, ngroups, dstate)"
                         : c->varlen ? "(total_tokens, ngroups, dstate)"
                                     : "(batch, T, ngroups, dstate)";
  const char *lead_names[2] = {c->varlen ? "total_tokens" : "batch", "T"};
  const View &x = c->x;
  if ((s = expect_rank(x, rank, shape))) return s;
  if ((s = expect_float(x))) return s;
  if ((s = expect_size(x, lead, c->nheads, "nheads"))) return s;
  if ((s = expect_size(x, lead + 1, c->dim, "dim"))) return s;
  if ((s = expect_stride(x, lead + 1, 1, "1"))) return s;
  if ((s = expect_stride(x, lead, c->dim, "dim"))) return s;
  auto leading = [&](const View &v) {
    for (int k = 0; k < lead; ++k) {
      if (int st = expect_size(v, k, x.shape[k], lead_names[k])) return st;
    }
    return static_cast<int>(MAMBA_SSU_SUCCESS);
  };
  for (const View *v : {&c->out, &c->z}) {
    if (!v->present()) continue;
    if ((s = expect_rank(*v, rank, shape))) return s;
    if ((s = leading(*v))) return s;
    if ((s = expect_size(*v, lead, c->nheads, "nheads"))) return s;
    if ((s = expect_size(*v, lead + 1, c->dim, "dim"))) return s;
    if ((s = expect_dtype(*v, x.dtype, "the dtype of x"))) return s;
    if ((s = expect_stride(*v, lead + 1, 1, "1"))) return s;
    if ((s = expect_stride(*v, lead, c->dim, "dim"))) return s;
  }
  const View &dt = c->dt;
  if ((s = expect_rank(dt, rank, shape))) return s;
  if ((s = leading(dt))) return s;
  if ((s = expect_size(dt, lead, c->nheads, "nheads"))) return s;
  if ((s = expect_size(dt, lead + 1, c->dim, "dim"))) return s;
  if ((s = expect_float(dt))) return s;
  if ((s = expect_stride(dt, lead, 1, "1"))) return s;
  if ((s = expect_stride(dt, lead + 1, 0, "0"))) return s;
  for (const View *v : {&c->B, &c->C}) {
    if ((s = expect_rank(*v, rank, bc_shape))) return s;
    if ((s = leading(*v))) return s;
    if (v == &c->B) {
      c->ngroups = v->shape[lead];
    } else if ((s = expect_size(*v, lead, c->ngroups, "ngroups (size of B)"))) {
      return s;
    }
    if ((s = expect_size(*v, lead + 1, c->dstate, "dstate"))) return s;
    if ((s = expect_dtype(*v, x.dtype, "the dtype of x"))) return s;
    if ((s = expect_stride(*v, lead + 1, 1, "1"))) return s;
    if ((s = expect_stride(*v, lead, c->dstate, "dstate"))) return s;
  }
  return MAMBA_SSU_SUCCESS;
}

// The index tensors, FlashInfer's rules: each I32 or I64; the slot indices' dtype is
// state_batch_indices', else dst_state_batch_indices', else intermediate_state_indices';
// dst_state_batch_indices has state_batch_indices' dtype, and so has intermediate_state_indices
// when both are given; num_accepted_tokens and cu_seqlens have their own. Shapes:
// state_batch_indices and dst_state_batch_indices (>= batch,) or (>= batch, >= T) (T: 1 single
// token; the tokens, or cache_steps in the varlen form, multi token; longer, padded tensors are
// taken and their first rows read); intermediate_state_indices (batch,); num_accepted_tokens
// (>= batch,) and only with state_batch_indices; cu_seqlens (batch + 1,) (checked where it
// sets batch). intermediate_state_indices without intermediate_states_buffer is checked and
// then not read (FlashInfer's kernels read it only with the buffer).
int check_indices(Call *c) {
  int s;
  for (const View *v : {&c->sbi, &c->dsbi, &c->inter_idx, &c->nat, &c->cu}) {
    if (v->present() && !is_index_dtype(v->dtype))
      return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, v->name, "expected dtype I32 or I64, got %s",
                    dtype_name(v->dtype));
  }
  for (const View *v : {&c->dsbi, &c->inter_idx}) {
    if (c->sbi.present() && v->present() && v->dtype != c->sbi.dtype)
      return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, v->name,
                    "expected dtype %s (the dtype of state_batch_indices), got %s",
                    dtype_name(c->sbi.dtype), dtype_name(v->dtype));
  }
  for (const View *v : {&c->sbi, &c->dsbi}) {
    if (!v->present()) continue;
    if (v->rank != 1 && v->rank != 2)
      return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, v->name,
                    "expected 1 or 2 dimensions ((batch,) or (batch, T)), got %d", v->rank);
    if (v->shape[0] < c->batch)
      return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, v->name,
                    "expected size(0) >= batch (%lld), got %lld", ll(c->batch),
                    ll(v->shape[0]));
    if (v->rank == 2 && v->shape[1] < c->ntokens)
      return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, v->name,
                    "expected size(1) >= %s (%lld), got %lld",
                    !c->multi ? "1" : c->varlen ? "cache_steps (the longest sequence)" : "T",
                    ll(c->ntokens), ll(v->shape[1]));
  }
  if (c->inter_idx.present()) {
    if ((s = expect_rank(c->inter_idx, 1, "(batch,)"))) return s;
    if ((s = expect_size(c->inter_idx, 0, c->batch, "batch"))) return s;
  }
  if (c->nat.present()) {
    if ((s = expect_rank(c->nat, 1, "(batch,)"))) return s;
    if (c->nat.shape[0] < c->batch)
      return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, c->nat.name,
                    "expected size(0) >= batch (%lld), got %lld", ll(c->batch),
                    ll(c->nat.shape[0]));
    if (!c->sbi.present())
      return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, c->nat.name,
                    "needs state_batch_indices (the read slot is picked from its row)");
  }
  const View *slots = c->sbi.present()        ? &c->sbi
                      : c->dsbi.present()     ? &c->dsbi
                      : c->inter_idx.present() ? &c->inter_idx
                                               : nullptr;
  c->index_dtype = slots != nullptr    ? slots->dtype
                   : c->cu.present() ? c->cu.dtype
                                     : MAMBA_SSU_I32;
  c->nat_dtype = c->nat.present() ? c->nat.dtype : c->index_dtype;
  c->cu_dtype = c->cu.present() ? c->cu.dtype : c->index_dtype;
  // Not read without the buffer.
  if (!c->inter.present()) c->inter_idx = View{};
  return MAMBA_SSU_SUCCESS;
}

// The intermediate buffer (entries, cache_steps, nheads, dim, dstate): the state's dtype,
// contiguous, size(1) == cache_steps.
int check_intermediate(const Call &c, int64_t cache_steps) {
  int s;
  const View &b = c.inter;
  if (!b.present()) return MAMBA_SSU_SUCCESS;
  if ((s = expect_rank(b, 5, "(entries, cache_steps, nheads, dim, dstate)"))) return s;
  if (b.shape[1] != cache_steps)
    return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, b.name,
                  "expected size(1) == cache_steps (%lld: the kernels step through the buffer "
                  "by cache_steps), got %lld",
                  ll(cache_steps), ll(b.shape[1]));
  if ((s = expect_size(b, 2, c.nheads, "nheads"))) return s;
  if ((s = expect_size(b, 3, c.dim, "dim"))) return s;
  if ((s = expect_size(b, 4, c.dstate, "dstate"))) return s;
  if ((s = expect_dtype(b, c.state.dtype, "the dtype of state"))) return s;
  const __int128 head = static_cast<__int128>(c.dim) * c.dstate;
  const __int128 block = head * c.nheads;
  if ((s = expect_stride(b, 4, 1, "1"))) return s;
  if ((s = expect_stride(b, 3, c.dstate, "dstate"))) return s;
  if ((s = expect_stride(b, 2, head, "dim * dstate"))) return s;
  if ((s = expect_stride(b, 1, block, "nheads * dim * dstate"))) return s;
  return expect_stride(b, 0, block * b.shape[1], "cache_steps * nheads * dim * dstate");
}

// Every rule of the contract that the parameter blocks cannot express; fills *c.
int check_call(const mamba_ssu_args &a, Call *c) {
  int s;
  if ((s = check_options_and_form(a, c))) return s;
  if ((s = check_state(c))) return s;
  if (!c->multi) {
    c->batch = c->x.rank >= 1 ? c->x.shape[0] : 0;
    if ((s = check_token_tensors(c, 1))) return s;
    c->ntokens = 1;
    c->total_tokens = c->batch;
  } else if (c->varlen) {
    if ((s = expect_rank(c->cu, 1, "(batch + 1,)"))) return s;
    c->batch = c->cu.shape[0] - 1;
    if ((s = check_token_tensors(c, 1))) return s;
    c->ntokens = a.cache_steps;
    c->total_tokens = c->x.shape[0];
  } else {
    if ((s = check_token_tensors(c, 2))) return s;
    c->batch = c->x.shape[0];
    c->ntokens = c->x.shape[1];
    c->total_tokens = mul_sat(c->batch, c->ntokens);
  }
  if ((s = check_per_head(*c))) return s;
  if ((s = check_state_scale(*c))) return s;
  if ((s = check_indices(c))) return s;
  if ((s = check_intermediate(*c, a.cache_steps))) return s;
  return c->multi ? check_inter_scales(*c, a.cache_steps) : MAMBA_SSU_SUCCESS;
}

// What the single- and multi-token parameter blocks (P: mamba_ssu_params or
// mamba_ssu_mtp_params, whose fields of the same name mean the same) take alike from a checked
// call: the tensors both forms have, the dtypes, the flags and the seed's planning fields.
template <class P>
void fill_common(const mamba_ssu_args &a, const Call &c, P *p) {
  p->pad_slot_id = a.pad_slot_id;
  p->state = const_cast<void *>(c.state.data);
  p->x = c.x.data;
  p->dt = c.dt.data;
  p->dt_bias = c.dt_bias.data;
  p->A = static_cast<const float *>(c.A.data);
  p->B = c.B.data;
  p->C = c.C.data;
  p->D = c.D.data;
  p->z = c.z.data;
  p->out = const_cast<void *>(c.out.data);
  p->state_batch_indices = c.sbi.data;
  p->dst_state_batch_indices = c.dsbi.data;
  p->state_dtype = c.state.dtype;
  p->input_dtype = c.x.dtype;
  p->weight_dtype = c.dt.dtype;
  p->index_dtype = c.index_dtype;
  p->dt_softplus = a.dt_softplus != 0 ? 1 : 0;
  p->update_state = a.disable_state_update != 0 ? 0 : 1;
  p->num_sms = a.num_sms;
  plan_seed_fields(a.seed, p);
}

mamba_ssu_params lower_single(const mamba_ssu_args &a, const Call &c) {
  mamba_ssu_params p{};
  const int64_t row = mul_sat(c.nheads, c.dim), bc_row = mul_sat(c.ngroups, c.dstate);
  p.batch = c.batch;
  p.nheads = c.nheads;
  p.dim = c.dim;
  p.dstate = c.dstate;
  p.ngroups = c.ngroups;
  p.state_cache_size = c.slots;
  p.state_stride_batch = outer(c.state, 0, mul_sat(row, c.dstate));
  p.x_stride_batch = outer(c.x, 0, row);
  p.dt_stride_batch = outer(c.dt, 0, c.nheads);
  p.B_stride_batch = outer(c.B, 0, bc_row);
  p.C_stride_batch = outer(c.C, 0, bc_row);
  p.z_stride_batch = c.z.present() ? outer(c.z, 0, row) : 0;
  p.out_stride_batch = outer(c.out, 0, row);
  if (c.sbi.present())
    p.state_batch_indices_stride = outer(c.sbi, 0, c.sbi.rank == 2 ? c.sbi.shape[1] : 1);
  if (c.dsbi.present())
    p.dst_state_batch_indices_stride = outer(c.dsbi, 0, c.dsbi.rank == 2 ? c.dsbi.shape[1] : 1);
  fill_common(a, c, &p);
  p.algorithm = a.algorithm;
  return p;
}

mamba_ssu_mtp_params lower_multi(const mamba_ssu_args &a, const Call &c) {
  mamba_ssu_mtp_params p{};
  const int64_t row = mul_sat(c.nheads, c.dim), bc_row = mul_sat(c.ngroups, c.dstate);
  p.batch = c.batch;
  p.ntokens = c.ntokens;
  p.total_tokens = c.total_tokens;
  p.nheads = c.nheads;
  p.dim = c.dim;
  p.dstate = c.dstate;
  p.ngroups = c.ngroups;
  p.state_cache_size = c.slots;
  p.cache_steps = c.inter.present() ? c.inter.shape[1] : c.ntokens;
  p.intermediate_cache_size = c.inter.present() ? c.inter.shape[0] : 0;
  p.state_stride_batch = outer(c.state, 0, mul_sat(row, c.dstate));
  // Batch and token strides; varlen reads no batch stride.
  auto token_strides = [&](const View &v, int64_t dense, int64_t *sb, int64_t *st) {
    if (c.varlen) {
      *sb = 0;
      *st = outer(v, 0, dense);
    } else {
      *st = outer(v, 1, dense);
      *sb = outer(v, 0, mul_sat(c.ntokens, *st < 0 ? 0 : *st));
    }
  };
  token_strides(c.x, row, &p.x_stride_batch, &p.x_stride_token);
  token_strides(c.dt, c.nheads, &p.dt_stride_batch, &p.dt_stride_token);
  token_strides(c.B, bc_row, &p.B_stride_batch, &p.B_stride_token);
  token_strides(c.C, bc_row, &p.C_stride_batch, &p.C_stride_token);
  if (c.z.present()) token_strides(c.z, row, &p.z_stride_batch, &p.z_stride_token);
  token_strides(c.out, row, &p.out_stride_batch, &p.out_stride_token);
  if (c.sbi.present()) {
    const int64_t cols = c.sbi.rank == 2 ? c.sbi.shape[1] : 0;
    p.state_batch_indices_stride = outer(c.sbi, 0, cols > 0 ? cols : 1);
    p.state_batch_indices_stride_col = cols > 1 ? c.sbi.strides[1] : 1;
    p.state_batch_indices_cols = cols;
  }
  if (c.dsbi.rank == 2) {
    const int64_t cols = c.dsbi.shape[1];
    p.dst_state_batch_indices_stride = outer(c.dsbi, 0, cols);
    p.dst_state_batch_indices_stride_col = cols > 1 ? c.dsbi.strides[1] : 1;
    p.dst_state_batch_indices_cols = cols;
  } else if (c.dsbi.present()) {
    // A 1-D dst index (FlashInfer's token stride 0): every token of sequence b goes to slot
    // dst[b].
    p.dst_state_batch_indices_stride = outer(c.dsbi, 0, 1);
    p.dst_state_batch_indices_stride_col = 0;
    p.dst_state_batch_indices_cols = c.ntokens;
  }
  if (c.nat.present()) p.num_accepted_tokens_stride = outer(c.nat, 0, 1);
  if (c.cu.present()) p.cu_seqlens_stride = outer(c.cu, 0, 1);
  if (c.inter_idx.present()) p.intermediate_state_indices_stride = outer(c.inter_idx, 0, 1);
  fill_common(a, c, &p);
  p.num_accepted_tokens = c.nat.data;
  p.cu_seqlens = c.cu.data;
  p.intermediate_states = const_cast<void *>(c.inter.data);
  p.intermediate_state_indices = c.inter_idx.data;
  p.num_accepted_tokens_dtype = c.nat_dtype;
  p.cu_seqlens_dtype = c.cu_dtype;
  return p;
}

// The FlashInfer argument that a parameter block's field belongs to (the block's checks name
// their fields): the tensor whose size, stride or pointer it is.
const char *argument_of_field(const char *field, bool varlen) {
  struct Map {
    const char *field, *argument;
  };
  static constexpr Map kMap[] = {
      {"total_tokens", "x"},
      {"nheads", "state"},
      {"dim", "state"},
      {"dstate", "state"},
      {"state_cache_size", "state"},
      {"state_stride_batch", "state"},
      {"state_dtype", "state"},
      {"ngroups", "B"},
      {"input_dtype", "x"},
      {"weight_dtype", "dt"},
      {"x_stride_batch", "x"},
      {"x_stride_token", "x"},
      {"dt_stride_batch", "dt"},
      {"dt_stride_token", "dt"},
      {"B_stride_batch", "B"},
      {"B_stride_token", "B"},
      {"C_stride_batch", "C"},
      {"C_stride_token", "C"},
      {"z_stride_batch", "z"},
      {"z_stride_token", "z"},
      {"out_stride_batch", "out"},
      {"out_stride_token", "out"},
      {"state_batch_indices_stride", "state_batch_indices"},
      {"state_batch_indices_stride_col", "state_batch_indices"},
      {"state_batch_indices_cols", "state_batch_indices"},
      {"dst_state_batch_indices_stride", "dst_state_batch_indices"},
      {"dst_state_batch_indices_stride_col", "dst_state_batch_indices"},
      {"num_accepted_tokens_stride", "num_accepted_tokens"},
      {"cu_seqlens_stride", "cu_seqlens"},
      {"num_accepted_tokens_dtype", "num_accepted_tokens"},
      {"cu_seqlens_dtype", "cu_seqlens"},
      {"intermediate_state_indices_stride", "intermediate_state_indices"},
      {"intermediate_states", "intermediate_states_buffer"},
      {"intermediate_cache_size", "intermediate_states_buffer"},
      {"seed_next", "seed.next"},
  };
  if (std::strcmp(field, "batch") == 0) return varlen ? "cu_seqlens" : "x";
  if (std::strcmp(field, "ntokens") == 0) return varlen ? "cache_steps" : "x";
  for (const Map &m : kMap) {
    if (std::strcmp(field, m.field) == 0) return m.argument;
  }
  return field;
}

// A failure of the parameter block's check or of the launch, renamed to the FlashInfer
// argument it concerns.
int renamed(int status, bool varlen) {
  if (status != MAMBA_SSU_SUCCESS) {
    const char *field = last_argument();
    if (field[0] != '\0') rename_argument(argument_of_field(field, varlen));
  }
  return status;
}

// The whole contract: the call's rules, then the parameter block's and the seed's (one
// check each, after the lowering). Fills the lowered block of the call's form.
int check_lowered(const mamba_ssu_args *a, Call *c, mamba_ssu_params *single,
                  mamba_ssu_mtp_params *multi, StateScale *scale) {
  if (a == nullptr) return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "args", "null pointer");
  if (int s = check_call(*a, c)) return s;
  if (!c->multi) {
    *single = lower_single(*a, *c);
    // The decode scales of an I16 state (the single-token path's only block-scaled form).
    *scale = StateScale{};
    if (c->state_scale.present()) {
      scale->data = static_cast<const float *>(c->state_scale.data);
      scale->slot_stride =
          outer(c->state_scale, 0, mul_sat(c->nheads, c->dim));
    }
    return renamed(ssu_check(single, a->seed, kSeedNames,
                             c->state.dtype == MAMBA_SSU_I16 ? scale : nullptr),
                   false);
  }
  *multi = lower_multi(*a, *c);
  *scale = StateScale{};
  if (c->state_scale.present()) {
    scale->data = static_cast<const float *>(c->state_scale.data);
    scale->slot_stride = outer(c->state_scale, 0, mul_sat(c->nheads, c->dim));
    if (c->inter.present() && c->inter_scales.present()) {
      scale->inter = static_cast<float *>(const_cast<void *>(c->inter_scales.data));
      scale->inter_entries = c->inter_scales.shape[0];
    }
  }
  return renamed(mtp_check(multi, a->seed, kSeedNames,
                           c->state.dtype == MAMBA_SSU_I16 ? scale : nullptr),
                 c->varlen);
}

}  // namespace
}  // namespace mamba_ssu

using namespace mamba_ssu;

extern "C" int mamba_ssu_check(const mamba_ssu_args *args, mamba_ssu_problem *problem) {
  clear_error();
  Call c;
  mamba_ssu_params single;
  mamba_ssu_mtp_params multi;
  StateScale scale;
  if (int s = check_lowered(args, &c, &single, &multi, &scale)) return s;
  if (problem == nullptr) return MAMBA_SSU_SUCCESS;
  mamba_ssu_problem p{};
  p.form = c.multi ? MAMBA_SSU_FORM_MULTI : MAMBA_SSU_FORM_SINGLE;
  p.varlen = c.varlen ? 1 : 0;
  p.batch = c.batch;
  p.ntokens = c.ntokens;
  p.total_tokens = c.total_tokens;
  p.nheads = c.nheads;
  p.dim = c.dim;
  p.dstate = c.dstate;
  p.ngroups = c.ngroups;
  p.state_cache_size = c.slots;
  p.cache_steps = c.inter.present() ? c.inter.shape[1] : 0;
  p.intermediate_cache_size = c.inter.present() ? c.inter.shape[0] : 0;
  p.state_dtype = c.state.dtype;
  p.input_dtype = c.x.dtype;
  p.weight_dtype = c.dt.dtype;
  p.index_dtype = c.index_dtype;
  p.stochastic_rounding = args->seed.mode != MAMBA_SSU_SEED_MODE_NONE ? 1 : 0;
  if (c.multi) {
    p.algorithm = MAMBA_SSU_ALGO_SIMPLE;
  } else if (args->algorithm != MAMBA_SSU_ALGO_AUTO || args->num_sms <= 0) {
    p.algorithm = args->algorithm;
  } else {
    mamba_ssu_device_props d;
    if (int s = planning_props(args->num_sms, &d)) return s;
    p.algorithm = auto_algorithm(c.batch, c.nheads, c.dim, c.state.dtype, d);
  }
  *problem = p;
  return MAMBA_SSU_SUCCESS;
}

namespace {
// The plan of a checked call on device *d, or (d null) on planning_props(num_sms)'s device,
// queried after the call passed the check.
int plan_on(const mamba_ssu_args *args, const mamba_ssu_device_props *d, int32_t num_sms,
            mamba_ssu_launch_plan *out) {
  if (out == nullptr) return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "out", "null pointer");
  if (d != nullptr) {
    if (int s = check_props(d)) return s;
  }
  Call c;
  mamba_ssu_params single;
  mamba_ssu_mtp_params multi;
  StateScale scale;
  if (int s = check_lowered(args, &c, &single, &multi, &scale)) return s;
  mamba_ssu_device_props queried;
  if (d == nullptr) {
    if (int s = planning_props(num_sms, &queried)) return s;
    d = &queried;
  }
  return renamed(c.multi ? mtp_plan(multi, *d, out) : ssu_plan(single, *d, out), c.varlen);
}
}  // namespace

extern "C" int mamba_ssu_plan(const mamba_ssu_args *args, int32_t num_sms,
                              mamba_ssu_launch_plan *out) {
  clear_error();
  return plan_on(args, nullptr, num_sms, out);
}

extern "C" int mamba_ssu_plan_for_device(const mamba_ssu_args *args,
                                         const mamba_ssu_device_props *props,
                                         mamba_ssu_launch_plan *out) {
  clear_error();
  if (props == nullptr) return reject(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "props", "null pointer");
  return plan_on(args, props, 0, out);
}

extern "C" int mamba_ssu_launch(mamba_ssu_stream_t stream, const mamba_ssu_args *args) {
  clear_error();
  Call c;
  mamba_ssu_params single;
  mamba_ssu_mtp_params multi;
  StateScale scale;
  if (int s = check_lowered(args, &c, &single, &multi, &scale)) return s;
  const int s = renamed(c.multi ? mtp_launch(stream, multi, args->seed, scale)
                                : ssu_launch(stream, single, args->seed, scale),
                        c.varlen);
  if (s == MAMBA_SSU_SUCCESS && args->seed.chain != nullptr)
    prefetcher_link_enqueued(args->seed.chain, args->seed.next);
  return s;
}
