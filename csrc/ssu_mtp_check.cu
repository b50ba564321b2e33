// ssu_mtp_check.cu — the multi-token parameter block's check: everything about a
// mamba_ssu_mtp_params block that the host can check (sizes, enumerations, pointers and their
// alignment, the seed, strides, index shapes, write modes, extents). Index VALUES live in
// device memory and are the kernel's to range-check. Same style, error kinds and detail
// messages as the single-token ssu_check() in ssu.cu; a pure host function.
#include <limits>

#include <algorithm>

#include "checks.h"
#include "common.cuh"
#include "launch.h"

namespace mamba_ssu {
namespace {

// Largest byte extent of any tensor: keeps every 64-bit offset far from overflow.
constexpr __int128 kMaxExtentBytes = static_cast<__int128>(1) << 60;
// Most thread blocks the launcher uses per (sequence, head).
constexpr int64_t kMaxBlocksPerHead = 4;


// a * b for a, b >= 0, saturated just above kMaxExtentBytes (no product can overflow).
__int128 mul_sat(__int128 a, __int128 b) {
  if (a != 0 && b > (kMaxExtentBytes + 1) / a) return kMaxExtentBytes + 1;
  return a * b;
}

// The byte extent of a tensor whose element [i, j, k] lives at i*s0 + j*s1 + k (i < n0,
// j < n1, k < inner_n; n0, n1 >= 0, strides >= 0), saturated just above kMaxExtentBytes.
__int128 extent_bytes(int64_t n0, int64_t s0, int64_t n1, int64_t s1, __int128 inner_n, int bytes) {
  const __int128 a = n0 > 0 ? mul_sat(n0 - 1, s0) : 0;
  const __int128 b = n1 > 0 ? mul_sat(n1 - 1, s1) : 0;
  const __int128 c = inner_n > kMaxExtentBytes ? kMaxExtentBytes + 1 : inner_n;
  return mul_sat(a + b + c, bytes);
}

}  // namespace

int mtp_check(const mamba_ssu_mtp_params *p, const mamba_ssu_seed &seed, const SeedNames &names,
              const StateScale *scale) {
  if (p == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "params: null pointer");
  int s;
  const bool varlen = p->cu_seqlens != nullptr;

  // Sizes.
  if (p->batch < 1) return invalid("batch: expected >= 1, got %lld", ll(p->batch));
  if (p->ntokens < 1 || p->ntokens > MAMBA_SSU_MTP_MAX_TOKENS)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "ntokens: expected 1..=%d, got %lld",
                MAMBA_SSU_MTP_MAX_TOKENS, ll(p->ntokens));
  if (p->nheads < 1) return invalid("nheads: expected >= 1, got %lld", ll(p->nheads));
  if (p->dim < 1 || p->dim > (int64_t{1} << 30))
    return invalid("dim: expected 1..=1073741824, got %lld", ll(p->dim));
  if ((s = check_dstate(p->dstate, p->state_dtype))) return s;
  if (p->ngroups < 1 || p->nheads % p->ngroups != 0)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "ngroups: expected a divisor of nheads (%lld), got %lld", ll(p->nheads),
                ll(p->ngroups));
  if (p->state_cache_size < 1)
    return invalid("state_cache_size: expected >= 1, got %lld", ll(p->state_cache_size));
  // Without read indices sequence b reads slot b.
  if (p->state_batch_indices == nullptr && p->batch > p->state_cache_size)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "state_cache_size: without state_batch_indices sequence b uses slot b: "
                "expected >= batch (%lld), got %lld",
                ll(p->batch), ll(p->state_cache_size));
  {
    // The launcher's most blocks per (sequence, head): 4 on small grids, and at least one per
    // 64 rows (a block stages up to 64 rows); a fused chain's link block comes on top.
    const int64_t per_head = std::max<int64_t>(kMaxBlocksPerHead, (p->dim + 63) / 64);
    const __int128 blocks = mul_sat(mul_sat(p->batch, p->nheads), per_head) +
                            (p->seed_next != nullptr ? 1 : 0);
    if (blocks > std::numeric_limits<int32_t>::max())
      return fail(MAMBA_SSU_ERROR_UNSUPPORTED,
                  "batch: batch * nheads * max(4, ceil(dim / 64)) (+1 with seed_next) expected "
                  "<= %d (grid size), got %lld x %lld x %lld",
                  std::numeric_limits<int32_t>::max(), ll(p->batch), ll(p->nheads),
                  ll(per_head));
  }
  if (varlen && p->total_tokens < 0)
    return invalid("total_tokens: expected >= 0, got %lld", ll(p->total_tokens));

  // Enumerations. An I16 state comes with its scales (StateScale, mamba_ssu_args only).
  if (!is_float_dtype(p->state_dtype) && !(scale != nullptr && p->state_dtype == MAMBA_SSU_I16))
    return invalid("state_dtype: expected F32, F16 or BF16, got %lld", ll(p->state_dtype));
  if (!is_float_dtype(p->input_dtype))
    return invalid("input_dtype: expected F32, F16 or BF16, got %lld", ll(p->input_dtype));
  if (!is_float_dtype(p->weight_dtype))
    return invalid("weight_dtype: expected F32, F16 or BF16, got %lld", ll(p->weight_dtype));
  const bool has_index = p->state_batch_indices != nullptr ||
                         p->dst_state_batch_indices != nullptr ||
                         p->num_accepted_tokens != nullptr || varlen ||
                         p->intermediate_state_indices != nullptr;
  if (has_index && p->index_dtype != MAMBA_SSU_I32 && p->index_dtype != MAMBA_SSU_I64)
    return invalid("index_dtype: expected I32 or I64, got %lld", ll(p->index_dtype));
  // num_accepted_tokens' and cu_seqlens' own dtypes (0: index_dtype), read where given.
  const int32_t nat_dtype = own_index_dtype(p->num_accepted_tokens_dtype, p->index_dtype);
  const int32_t cu_dtype = own_index_dtype(p->cu_seqlens_dtype, p->index_dtype);
  if (p->num_accepted_tokens != nullptr && nat_dtype != MAMBA_SSU_I32 && nat_dtype != MAMBA_SSU_I64)
    return invalid("num_accepted_tokens_dtype: expected I32, I64 or 0 (index_dtype), got %lld",
                   ll(p->num_accepted_tokens_dtype));
  if (varlen && cu_dtype != MAMBA_SSU_I32 && cu_dtype != MAMBA_SSU_I64)
    return invalid("cu_seqlens_dtype: expected I32, I64 or 0 (index_dtype), got %lld",
                   ll(p->cu_seqlens_dtype));
  if ((s = check_long_dstate(p->dstate, p->state_dtype, true))) return s;

  // Pointers and alignment.
  const int sb = float_bytes(p->state_dtype);
  const int ib = float_bytes(p->input_dtype);
  const int wb = float_bytes(p->weight_dtype);
  const int xb = index_bytes(p->index_dtype);
  if ((s = check_pointer(p->state, "state", 16))) return s;
  if ((s = check_pointer(p->x, "x", ib))) return s;
  if ((s = check_pointer(p->dt, "dt", wb))) return s;
  if ((s = check_pointer(p->A, "A", 4))) return s;
  if ((s = check_pointer(p->B, "B", 16))) return s;
  if ((s = check_pointer(p->C, "C", 16))) return s;
  if ((s = check_pointer(p->out, "out", ib))) return s;
  if (p->z != nullptr && (s = check_pointer(p->z, "z", ib))) return s;
  if (p->D != nullptr && (s = check_pointer(p->D, "D", wb))) return s;
  if (p->dt_bias != nullptr && (s = check_pointer(p->dt_bias, "dt_bias", wb))) return s;
  if (p->intermediate_states != nullptr &&
      (s = check_pointer(p->intermediate_states, "intermediate_states", 16)))
    return s;
  // The seed, exactly as the single-token check.
  if ((s = check_seed(seed, p->state_dtype, names))) return s;
  // An I16 state's decode scales: 4-byte aligned, the rows of different slots apart; the
  // intermediate buffer's with an int16 buffer and scales (the contract requires them there).
  const bool scaled = scale != nullptr && scale->data != nullptr;
  if (scaled) {
    if ((s = check_state_scale(*scale, p->nheads, p->dim, p->state_cache_size))) return s;
    if (p->intermediate_states != nullptr) {
      if (scale->inter == nullptr)
        return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                    "intermediate_state_scales: required with an int16 intermediate buffer and "
                    "state_scale (FlashInfer's kernel writes the buffer's scales there)");
      if ((s = check_pointer(scale->inter, "intermediate_state_scales", 4))) return s;
    }
  }
  if ((s = check_index(p->state_batch_indices, "state_batch_indices", p->index_dtype,
                       p->state_batch_indices_stride, "state_batch_indices_stride")))
    return s;
  if ((s = check_index(p->dst_state_batch_indices, "dst_state_batch_indices", p->index_dtype,
                       p->dst_state_batch_indices_stride, "dst_state_batch_indices_stride")))
    return s;
  if ((s = check_index(p->num_accepted_tokens, "num_accepted_tokens", nat_dtype,
                       p->num_accepted_tokens_stride, "num_accepted_tokens_stride")))
    return s;
  if ((s = check_index(p->cu_seqlens, "cu_seqlens", cu_dtype, p->cu_seqlens_stride,
                       "cu_seqlens_stride")))
    return s;
  if ((s = check_index(p->intermediate_state_indices, "intermediate_state_indices",
                       p->index_dtype, p->intermediate_state_indices_stride,
                       "intermediate_state_indices_stride")))
    return s;

  // Index shapes: a 1-D (cols 0) or 2-D read index, a 2-D dst index wide enough for the
  // longest sequence.
  if (p->state_batch_indices != nullptr) {
    if (p->state_batch_indices_cols < 0)
      return invalid("state_batch_indices_cols: expected >= 0 (0: a 1-D index), got %lld",
                     ll(p->state_batch_indices_cols));
    if (p->state_batch_indices_cols > 0 &&
        (s = check_nonneg(p->state_batch_indices_stride_col, "state_batch_indices_stride_col")))
      return s;
  }
  if (p->dst_state_batch_indices != nullptr) {
    if (p->dst_state_batch_indices_cols < 1)
      return invalid("dst_state_batch_indices: expected a 2-D index (cols >= 1), got cols %lld",
                     ll(p->dst_state_batch_indices_cols));
    if (p->dst_state_batch_indices_cols < p->ntokens)
      return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                  "dst_state_batch_indices: a 2-D index narrower than the longest sequence it "
                  "must serve: expected cols >= ntokens (%lld), got %lld",
                  ll(p->ntokens), ll(p->dst_state_batch_indices_cols));
    if ((s = check_nonneg(p->dst_state_batch_indices_stride_col,
                          "dst_state_batch_indices_stride_col")))
      return s;
  }

  // Write modes.
  if (p->intermediate_states != nullptr && p->dst_state_batch_indices != nullptr)
    return fail(MAMBA_SSU_ERROR_INVALID_VALUE,
                "dst_state_batch_indices: two write modes at once (intermediate_states and "
                "dst_state_batch_indices)");
  if (p->intermediate_state_indices != nullptr && p->intermediate_states == nullptr)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "intermediate_state_indices: given without intermediate_states");
  if (p->intermediate_states != nullptr) {
    if (p->cache_steps < p->ntokens)
      return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                  "cache_steps: expected >= ntokens (%lld), got %lld", ll(p->ntokens),
                  ll(p->cache_steps));
    if (p->intermediate_cache_size < 1)
      return invalid("intermediate_cache_size: expected >= 1, got %lld",
                     ll(p->intermediate_cache_size));
  }

  // Strides (elements). Varlen reads no batch stride.
  // nheads < 2^29 (grid bound), dim <= 2^30: row fits int64, head_block needs 128 bits.
  const __int128 head_block = static_cast<__int128>(p->nheads) * p->dim * p->dstate;
  const int64_t row = p->nheads * p->dim;
  const int64_t bc_row = p->ngroups * p->dstate;
  if ((s = check_stride16(p->state_stride_batch, "state_stride_batch", sb, head_block))) return s;
  if (!varlen) {
    if ((s = check_nonneg(p->x_stride_batch, "x_stride_batch"))) return s;
    if ((s = check_nonneg(p->dt_stride_batch, "dt_stride_batch"))) return s;
    if ((s = check_stride16(p->B_stride_batch, "B_stride_batch", ib, 0))) return s;
    if ((s = check_stride16(p->C_stride_batch, "C_stride_batch", ib, 0))) return s;
    if (p->z != nullptr && (s = check_nonneg(p->z_stride_batch, "z_stride_batch"))) return s;
    if ((s = check_nonneg(p->out_stride_batch, "out_stride_batch"))) return s;
  }
  if ((s = check_nonneg(p->x_stride_token, "x_stride_token"))) return s;
  if ((s = check_nonneg(p->dt_stride_token, "dt_stride_token"))) return s;
  if ((s = check_stride16(p->B_stride_token, "B_stride_token", ib, 0))) return s;
  if ((s = check_stride16(p->C_stride_token, "C_stride_token", ib, 0))) return s;
  if (p->z != nullptr && (s = check_nonneg(p->z_stride_token, "z_stride_token"))) return s;
  if ((s = check_nonneg(p->out_stride_token, "out_stride_token"))) return s;

  // Output rows must not overlap. A token row is nheads*dim elements. Fixed length: the rows
  // of one sequence are out_stride_token apart (checked when ntokens > 1) and sequences
  // out_stride_batch apart, which must cover a whole sequence (checked when batch > 1).
  // Varlen: rows are out_stride_token apart (checked when total_tokens > 1).
  const int64_t rows = varlen ? p->total_tokens : (p->ntokens > 1 ? 2 : 1);
  if (rows > 1 && p->out_stride_token < row)
    return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                "out_stride_token: expected >= nheads * dim (%lld) so token rows do not "
                "overlap, got %lld",
                ll(row), ll(p->out_stride_token));
  if (!varlen && p->batch > 1) {
    const __int128 span =
        p->ntokens > 1 ? static_cast<__int128>(p->ntokens) * p->out_stride_token : row;
    if (p->out_stride_batch < span)
      return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
                  "out_stride_batch: expected >= %s (%lld) so sequences' rows do not overlap, "
                  "got %lld",
                  p->ntokens > 1 ? "ntokens * out_stride_token" : "nheads * dim", ll128(span),
                  ll(p->out_stride_batch));
  }

  // Extents.
  const int64_t nb = varlen ? 1 : p->batch;        // batch-stride rows reached
  const int64_t nt = varlen ? p->total_tokens : p->ntokens;  // token-stride rows reached
  struct Extent {
    const char *name;
    bool present;
    __int128 bytes;
  };
  auto tok = [&](int64_t sbat, int64_t stok, __int128 inner, int bytes) {
    return extent_bytes(nb, varlen ? 0 : sbat, nt, stok, inner, bytes);
  };
  auto idx2 = [&](int64_t stride, int64_t cols, int64_t stride_col, int bytes = 0) {
    return extent_bytes(p->batch, stride, cols > 0 ? cols : 1, cols > 0 ? stride_col : 0, 1,
                        bytes > 0 ? bytes : xb);
  };
  const Extent extents[] = {
      {"state", true,
       extent_bytes(p->state_cache_size, p->state_stride_batch, 1, 0, head_block, sb)},
      {"intermediate_states", p->intermediate_states != nullptr,
       mul_sat(mul_sat(mul_sat(p->intermediate_cache_size, p->cache_steps), head_block), sb)},
      {"x", true, tok(p->x_stride_batch, p->x_stride_token, row, ib)},
      {"out", true, tok(p->out_stride_batch, p->out_stride_token, row, ib)},
      {"z", p->z != nullptr, tok(p->z_stride_batch, p->z_stride_token, row, ib)},
      {"B", true, tok(p->B_stride_batch, p->B_stride_token, bc_row, ib)},
      {"C", true, tok(p->C_stride_batch, p->C_stride_token, bc_row, ib)},
      {"dt", true, tok(p->dt_stride_batch, p->dt_stride_token, p->nheads, wb)},
      {"state_batch_indices", p->state_batch_indices != nullptr,
       idx2(p->state_batch_indices_stride, p->state_batch_indices_cols,
            p->state_batch_indices_stride_col)},
      {"dst_state_batch_indices", p->dst_state_batch_indices != nullptr,
       idx2(p->dst_state_batch_indices_stride, p->dst_state_batch_indices_cols,
            p->dst_state_batch_indices_stride_col)},
      {"num_accepted_tokens", p->num_accepted_tokens != nullptr,
       idx2(p->num_accepted_tokens_stride, 0, 0, index_bytes(nat_dtype))},
      {"cu_seqlens", varlen,
       extent_bytes(p->batch + 1, p->cu_seqlens_stride, 1, 0, 1, index_bytes(cu_dtype))},
      {"intermediate_state_indices", p->intermediate_state_indices != nullptr,
       idx2(p->intermediate_state_indices_stride, 0, 0)},
  };
  for (const Extent &e : extents) {
    if (e.present && e.bytes > kMaxExtentBytes)
      return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "%s: extent above 2^60 bytes", e.name);
  }
  if (scaled && extent_bytes(p->state_cache_size, scale->slot_stride, 1, 0, row, 4) > kMaxExtentBytes)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "state_scale: extent above 2^60 bytes");
  if (scaled && scale->inter != nullptr &&
      mul_sat(mul_sat(mul_sat(scale->inter_entries, p->cache_steps), row), 4) > kMaxExtentBytes)
    return fail(MAMBA_SSU_ERROR_UNSUPPORTED, "intermediate_state_scales: extent above 2^60 bytes");
  return MAMBA_SSU_SUCCESS;
}

}  // namespace mamba_ssu

extern "C" int mamba_ssu_selective_state_update_mtp_check(const mamba_ssu_mtp_params *params) {
  using namespace mamba_ssu;
  clear_error();
  if (params == nullptr) return fail(MAMBA_SSU_ERROR_INVALID_ARGUMENT, "params: null pointer");
  mamba_ssu_seed seed;
  SeedNames names;
  if (int s = legacy_seed(*params, &seed, &names)) return s;
  return mtp_check(params, seed, names);
}
