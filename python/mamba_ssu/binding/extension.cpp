// extension.cpp — the torch binding of mamba-ssu: a host-compiler translation unit over the
// crate's C ABI (csrc/include/mamba_ssu.h), linked with the crate's static library and torch's
// shared CUDA runtime.
//
// What it provides:
//   - `_C.selective_state_update(...)`: maps torch tensors (already normalised by the Python
//     layer to FlashInfer's 3-D/4-D shapes) onto one mamba_ssu_params, checks shapes, dtypes,
//     strides and devices (errors name the argument), and enqueues the crate's kernel on torch's
//     current stream of the tensors' device under a device guard. The same function is the
//     CUDA kernel of the torch op `mamba_ssu::selective_state_update` (TORCH_LIBRARY, for
//     torch.compile; its fake implementation is in Python).
//   - `_C.selective_state_update_mtp(...)` / op `mamba_ssu::selective_state_update_mtp`: the
//     multi-token (speculative-decoding verify) form, fixed length (4-D x) or varlen (3-D x with
//     cu_seqlens), mapped onto one mamba_ssu_mtp_params with the same kind of checks; the op
//     also mutates the optional intermediate_states_buffer.
//   - `_C.draw_seeds(out)` / op `mamba_ssu::draw_seeds`: n consecutive stock
//     `torch.randint(0, 2**32, (1,))` draws from the device's default CUDA generator in one
//     launch (graph-safe: under capture it reads the generator's device state).
//   - `_C.SeedPrefetcher`: per device, `next_seed()` replaces the per-layer `torch.randint`
//     (one batched draw per N calls), and the fused path (the SSU derives the stock seed
//     itself), per call or chained over a delimited forward, for both SSU forms.
//
// Torch's generator contract this relies on (torch 2.11, ATen/cuda/CUDAGeneratorImpl.h and
// PhiloxCudaStateRaw.cuh): one `torch.randint(0, 2**32, (1,))` takes philox_cuda_state(4) under
// the generator's mutex; eagerly that returns (seed, offset) by value and advances the host
// offset by 4; under torch.cuda.graph capture it returns two device pointers (seed, offset
// written by every replay) and the intragraph offset, which advances by 4 instead.
// docs/torch-binding.md of this repository describes it in full.
#include <torch/extension.h>

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mamba_ssu.h"

namespace {

using at::Tensor;
using std::optional;

// ---------------------------------------------------------------------------------------------
// Status handling: every C ABI status is checked; the detail of the failure becomes the message.

[[noreturn]] void raise_status(int status, const char *what) {
  const std::string msg = std::string(what) + ": " + mamba_ssu_status_string(status) + ": " +
                          mamba_ssu_last_error_detail();
  if (status == MAMBA_SSU_ERROR_INVALID_ARGUMENT) TORCH_CHECK_VALUE(false, msg);
  if (status == MAMBA_SSU_ERROR_UNSUPPORTED) TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
  TORCH_CHECK(false, msg);
}

void check_status(int status, const char *what) {
  if (status != MAMBA_SSU_SUCCESS) raise_status(status, what);
}

mamba_ssu_stream_t as_stream(const c10::cuda::CUDAStream &s) {
  return reinterpret_cast<mamba_ssu_stream_t>(s.stream());
}

// ---------------------------------------------------------------------------------------------
// Tensor checks (no GPU needed: they run before anything touches a device).

int32_t float_dtype(const Tensor &t, const char *name) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return MAMBA_SSU_F32;
    case at::kHalf:
      return MAMBA_SSU_F16;
    case at::kBFloat16:
      return MAMBA_SSU_BF16;
    default:
      TORCH_CHECK_TYPE(false, name, ": expected float32, float16 or bfloat16, got ",
                       t.scalar_type());
  }
}

void check_dim(const Tensor &t, const char *name, int64_t ndim) {
  TORCH_CHECK_VALUE(t.dim() == ndim, name, ": expected ", ndim, " dimensions, got shape ",
                    t.sizes());
}

void check_size(const Tensor &t, const char *name, int64_t d, int64_t expected,
                const char *what) {
  TORCH_CHECK_VALUE(t.size(d) == expected, name, ": expected size(", d, ") == ", expected, " (",
                    what, "), got shape ", t.sizes());
}

// A stride matters only where the dimension has more than one element.
void check_stride(const Tensor &t, const char *name, int64_t d, int64_t expected) {
  TORCH_CHECK_VALUE(t.size(d) <= 1 || t.stride(d) == expected, name, ": expected stride(", d,
                    ") == ", expected, ", got strides ", t.strides(), " for shape ", t.sizes());
}

void same_dtype(const Tensor &t, const char *name, const Tensor &ref, const char *ref_name) {
  TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), name, ": expected the dtype of ",
                   ref_name, " (", ref.scalar_type(), "), got ", t.scalar_type());
}

// The batch (outermost) stride to pass: the tensor's own where it has more than one entry,
// else `natural` (a size-1 dimension's stride carries no meaning in torch).
int64_t outer_stride(const Tensor &t, int64_t natural) {
  return t.size(0) > 1 ? t.stride(0) : natural;
}

void check_device(const Tensor &t, const char *name, const Tensor &state) {
  TORCH_CHECK_VALUE(t.device() == state.device(), name, ": expected a tensor on ",
                    state.device(), " (the device of state), got ", t.device());
}

// The multiprocessor count of a device, queried once per device.
int32_t num_sms(c10::DeviceIndex device) {
  static std::mutex mu;
  static std::vector<int32_t> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto i = static_cast<size_t>(device);
  if (i >= cache.size()) cache.resize(i + 1, 0);
  if (cache[i] == 0) {
    int value = 0;
    const cudaError_t err = cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device);
    TORCH_CHECK(err == cudaSuccess, "cudaDeviceGetAttribute(MultiProcessorCount): ",
                cudaGetErrorString(err));
    cache[i] = value;
  }
  return cache[i];
}

// ---------------------------------------------------------------------------------------------
// The SSU arguments: tensors -> mamba_ssu_params (every pointer but the seed's).

struct SsuTensors {
  Tensor state, x, dt, A, B, C;
  optional<Tensor> D, z, dt_bias, sbi, dsbi;
  Tensor out;
};

// The element types of a call's tensors, checked alike for the single- and multi-token forms.
struct Dtypes {
  int32_t state, input, weight;
};

// Dtypes, the layouts within one token row (the kernels' contract; FlashInfer's layouts) and
// the devices of the tensors both forms have. `lead`: the index of the head dimension of x (1
// for (batch, nheads, dim) and varlen (tokens, nheads, dim), 2 for (batch, T, nheads, dim)).
// T: SsuTensors or MtpTensors.
template <class T>
Dtypes check_common(const T &t, const Tensor &state, int64_t lead, int64_t dim, int64_t dstate) {
  Dtypes d{};
  d.state = float_dtype(state, "state");
  d.input = float_dtype(t.x, "x");
  for (const auto &[ten, name] : {std::pair{&t.B, "B"}, std::pair{&t.C, "C"}, std::pair{&t.out, "out"}})
    same_dtype(*ten, name, t.x, "x");
  if (t.z) same_dtype(*t.z, "z", t.x, "x");
  d.weight = float_dtype(t.dt, "dt");
  if (t.D) same_dtype(*t.D, "D", t.dt, "dt");
  if (t.dt_bias) same_dtype(*t.dt_bias, "dt_bias", t.dt, "dt");
  TORCH_CHECK_TYPE(t.A.scalar_type() == at::kFloat, "A: expected float32, got ",
                   t.A.scalar_type());

  check_stride(state, "state", 3, 1);
  check_stride(state, "state", 2, dstate);
  check_stride(state, "state", 1, dim * dstate);
  for (const auto &[ten, name] : {std::pair{&t.x, "x"}, std::pair{&t.out, "out"}}) {
    check_stride(*ten, name, lead + 1, 1);
    check_stride(*ten, name, lead, dim);
  }
  if (t.z) {
    check_stride(*t.z, "z", lead + 1, 1);
    check_stride(*t.z, "z", lead, dim);
  }
  check_stride(t.dt, "dt", lead, 1);
  check_stride(t.dt, "dt", lead + 1, 0);
  check_stride(t.A, "A", 0, 1);
  check_stride(t.A, "A", 1, 0);
  check_stride(t.A, "A", 2, 0);
  for (const auto &[ten, name] : {std::pair{&t.B, "B"}, std::pair{&t.C, "C"}}) {
    check_stride(*ten, name, lead + 1, 1);
    check_stride(*ten, name, lead, dstate);
  }
  for (const auto &[opt, name] : {std::pair{&t.D, "D"}, std::pair{&t.dt_bias, "dt_bias"}}) {
    if (!opt->has_value()) continue;
    check_stride(**opt, name, 0, 1);
    check_stride(**opt, name, 1, 0);
  }

  // Devices: every tensor on the device of state, a CUDA device.
  TORCH_CHECK_VALUE(state.is_cuda(), "state: expected a CUDA tensor, got one on ",
                    state.device());
  for (const auto &[ten, name] : {std::pair{&t.x, "x"}, std::pair{&t.dt, "dt"}, std::pair{&t.A, "A"},
                                  std::pair{&t.B, "B"}, std::pair{&t.C, "C"}, std::pair{&t.out, "out"}})
    check_device(*ten, name, state);
  for (const auto &[opt, name] :
       {std::pair{&t.D, "D"}, std::pair{&t.z, "z"}, std::pair{&t.dt_bias, "dt_bias"},
        std::pair{&t.sbi, "state_batch_indices"}, std::pair{&t.dsbi, "dst_state_batch_indices"}})
    if (opt->has_value()) check_device(**opt, name, state);
  return d;
}

mamba_ssu_params make_params(const SsuTensors &t, bool dt_softplus, int64_t pad_slot_id,
                             bool disable_state_update, int64_t philox_rounds,
                             int64_t algorithm, int64_t sr_rule) {
  const Tensor &state = t.state;
  check_dim(state, "state", 4);
  check_dim(t.x, "x", 3);
  const int64_t slots = state.size(0), nheads = state.size(1), dim = state.size(2),
                dstate = state.size(3);
  const int64_t batch = t.x.size(0);
  check_size(t.x, "x", 1, nheads, "nheads of state");
  check_size(t.x, "x", 2, dim, "dim of state");
  check_dim(t.dt, "dt", 3);
  check_size(t.dt, "dt", 0, batch, "batch of x");
  check_size(t.dt, "dt", 1, nheads, "nheads");
  check_size(t.dt, "dt", 2, dim, "dim");
  check_dim(t.A, "A", 3);
  check_size(t.A, "A", 0, nheads, "nheads");
  check_size(t.A, "A", 1, dim, "dim");
  check_size(t.A, "A", 2, dstate, "dstate");
  check_dim(t.B, "B", 3);
  check_size(t.B, "B", 0, batch, "batch of x");
  const int64_t ngroups = t.B.size(1);
  check_size(t.B, "B", 2, dstate, "dstate");
  check_dim(t.C, "C", 3);
  check_size(t.C, "C", 0, batch, "batch of x");
  check_size(t.C, "C", 1, ngroups, "ngroups of B");
  check_size(t.C, "C", 2, dstate, "dstate");
  check_dim(t.out, "out", 3);
  check_size(t.out, "out", 0, batch, "batch of x");
  check_size(t.out, "out", 1, nheads, "nheads");
  check_size(t.out, "out", 2, dim, "dim");
  for (const auto &[opt, name] : {std::pair{&t.D, "D"}, std::pair{&t.dt_bias, "dt_bias"}}) {
    if (!opt->has_value()) continue;
    check_dim(**opt, name, 2);
    check_size(**opt, name, 0, nheads, "nheads");
    check_size(**opt, name, 1, dim, "dim");
  }
  if (t.z) {
    check_dim(*t.z, "z", 3);
    check_size(*t.z, "z", 0, batch, "batch of x");
    check_size(*t.z, "z", 1, nheads, "nheads");
    check_size(*t.z, "z", 2, dim, "dim");
  }
  for (const auto &[opt, name] :
       {std::pair{&t.sbi, "state_batch_indices"}, std::pair{&t.dsbi, "dst_state_batch_indices"}}) {
    if (!opt->has_value()) continue;
    const Tensor &idx = **opt;
    TORCH_CHECK_VALUE(idx.dim() == 1 || idx.dim() == 2, name,
                      ": expected 1 or 2 dimensions ((batch,) or (batch, T)), got shape ",
                      idx.sizes());
    check_size(idx, name, 0, batch, "batch of x");
    TORCH_CHECK_VALUE(idx.dim() == 1 || idx.size(1) >= 1, name,
                      ": a 2-D index needs at least one column, got shape ", idx.sizes());
    TORCH_CHECK_TYPE(idx.scalar_type() == at::kInt || idx.scalar_type() == at::kLong, name,
                     ": expected int32 or int64, got ", idx.scalar_type());
  }
  if (t.sbi && t.dsbi) same_dtype(*t.dsbi, "dst_state_batch_indices", *t.sbi, "state_batch_indices");

  const Dtypes dty = check_common(t, state, 1, dim, dstate);
  const int32_t state_dtype = dty.state, input_dtype = dty.input, weight_dtype = dty.weight;

  mamba_ssu_params p{};
  p.batch = batch;
  p.nheads = nheads;
  p.dim = dim;
  p.dstate = dstate;
  p.ngroups = ngroups;
  p.state_cache_size = slots;
  p.state_stride_batch = outer_stride(state, nheads * dim * dstate);
  p.x_stride_batch = outer_stride(t.x, nheads * dim);
  p.dt_stride_batch = outer_stride(t.dt, nheads);
  p.B_stride_batch = outer_stride(t.B, ngroups * dstate);
  p.C_stride_batch = outer_stride(t.C, ngroups * dstate);
  p.z_stride_batch = t.z ? outer_stride(*t.z, nheads * dim) : 0;
  p.out_stride_batch = outer_stride(t.out, nheads * dim);
  p.state_batch_indices_stride = t.sbi ? outer_stride(*t.sbi, t.sbi->dim() == 2 ? t.sbi->size(1) : 1) : 0;
  p.dst_state_batch_indices_stride =
      t.dsbi ? outer_stride(*t.dsbi, t.dsbi->dim() == 2 ? t.dsbi->size(1) : 1) : 0;
  p.pad_slot_id = pad_slot_id;
  p.state = state.data_ptr();
  p.x = t.x.const_data_ptr();
  p.dt = t.dt.const_data_ptr();
  p.dt_bias = t.dt_bias ? t.dt_bias->const_data_ptr() : nullptr;
  p.A = static_cast<const float *>(t.A.const_data_ptr());
  p.B = t.B.const_data_ptr();
  p.C = t.C.const_data_ptr();
  p.D = t.D ? t.D->const_data_ptr() : nullptr;
  p.z = t.z ? t.z->const_data_ptr() : nullptr;
  p.out = t.out.data_ptr();
  p.state_batch_indices = t.sbi ? t.sbi->const_data_ptr() : nullptr;
  p.dst_state_batch_indices = t.dsbi ? t.dsbi->const_data_ptr() : nullptr;
  p.state_dtype = state_dtype;
  p.input_dtype = input_dtype;
  p.weight_dtype = weight_dtype;
  const optional<Tensor> &any_idx = t.sbi ? t.sbi : t.dsbi;
  p.index_dtype = (any_idx && any_idx->scalar_type() == at::kLong) ? MAMBA_SSU_I64 : MAMBA_SSU_I32;
  p.dt_softplus = dt_softplus ? 1 : 0;
  p.update_state = disable_state_update ? 0 : 1;
  TORCH_CHECK_VALUE(philox_rounds >= 0 && philox_rounds <= 10,
                    "philox_rounds: expected 0..=10, got ", philox_rounds);
  p.philox_rounds = static_cast<int32_t>(philox_rounds);
  TORCH_CHECK_VALUE(algorithm >= MAMBA_SSU_ALGO_AUTO && algorithm <= MAMBA_SSU_ALGO_VERTICAL,
                    "algorithm: expected 0 (auto), 1 (simple) or 2 (vertical), got ", algorithm);
  p.algorithm = static_cast<int32_t>(algorithm);
  TORCH_CHECK_VALUE(sr_rule == MAMBA_SSU_SR_V072 || sr_rule == MAMBA_SSU_SR_V074,
                    "sr_rule: expected 0 (FlashInfer 0.7.2's SR conversion) or 1 (0.7.4's), got ",
                    sr_rule);
  p.sr_rule = static_cast<int32_t>(sr_rule);
  p.seed_source = MAMBA_SSU_SEED_POINTER;
  // ALGO_AUTO's rule needs the SM count.
  p.num_sms = num_sms(state.get_device());
  return p;
}

void launch_ssu(const mamba_ssu_params &p, const c10::cuda::CUDAStream &stream) {
  check_status(mamba_ssu_selective_state_update(as_stream(stream), &p),
               "mamba_ssu.selective_state_update");
}

void check_rand_seed(const Tensor &seed, const Tensor &state) {
  TORCH_CHECK_VALUE(seed.numel() == 1, "rand_seed: expected a single-element tensor, got shape ",
                    seed.sizes());
  TORCH_CHECK_VALUE(seed.scalar_type() == at::kLong, "rand_seed: expected int64, got ",
                    seed.scalar_type());
  check_device(seed, "rand_seed", state);
}

// The SSU with its seed in device memory (FlashInfer's contract) or no stochastic rounding.
void ssu_pointer(Tensor state, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C,
                 optional<Tensor> D, optional<Tensor> z, optional<Tensor> dt_bias,
                 bool dt_softplus, optional<Tensor> state_batch_indices,
                 optional<Tensor> dst_state_batch_indices, int64_t pad_slot_id, Tensor out,
                 bool disable_state_update, optional<Tensor> rand_seed, int64_t philox_rounds,
                 int64_t algorithm, int64_t sr_rule) {
  SsuTensors t{state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices,
               dst_state_batch_indices, out};
  mamba_ssu_params p = make_params(t, dt_softplus, pad_slot_id, disable_state_update,
                                   rand_seed ? philox_rounds : 0, algorithm, sr_rule);
  if (rand_seed) {
    check_rand_seed(*rand_seed, state);
    p.rand_seed = static_cast<const int64_t *>(rand_seed->const_data_ptr());
  }
  const c10::cuda::CUDAGuard guard(state.device());
  launch_ssu(p, c10::cuda::getCurrentCUDAStream(state.get_device()));
}

// ---------------------------------------------------------------------------------------------
// The multi-token SSU (speculative-decoding verify): tensors -> mamba_ssu_mtp_params.
//
// Two forms, told apart by cu_seqlens (the Python layer has already normalised the shapes as
// FlashInfer does): fixed length, x (batch, T, nheads, dim) with T tokens per sequence; varlen,
// x (total_tokens, nheads, dim) with cu_seqlens (batch + 1,) and at most cache_steps tokens per
// sequence. dt, B, C, z and out have the leading dimensions of x.

struct MtpTensors {
  Tensor state, x, dt, A, B, C;
  optional<Tensor> D, z, dt_bias, sbi, dsbi;
  Tensor out;
  optional<Tensor> inter, inter_idx, cu, nat;
};

// The leading dimensions of a token tensor: (batch, T) fixed length, (total_tokens,) varlen.
struct TokenShape {
  bool varlen;
  int64_t n0;  // batch (fixed) or total tokens (varlen)
  int64_t T;   // tokens per sequence (fixed); not used varlen
  int64_t lead() const { return varlen ? 1 : 2; }
};

// Checks a token tensor's rank and sizes: its leading dimensions those of x, then `mid` (< 0:
// not checked) and `last`.
void check_tokens(const Tensor &t, const char *name, const TokenShape &s, int64_t mid,
                  const char *mid_what, int64_t last, const char *last_what) {
  check_dim(t, name, s.lead() + 2);
  check_size(t, name, 0, s.n0, s.varlen ? "total tokens of x" : "batch of x");
  if (!s.varlen) check_size(t, name, 1, s.T, "tokens per sequence of x");
  if (mid >= 0) check_size(t, name, s.lead(), mid, mid_what);
  check_size(t, name, s.lead() + 1, last, last_what);
}

// Token and batch strides of a token tensor whose token row holds `row` elements when dense.
// Varlen: the batch stride is not read (0). A size-1 dimension takes the dense stride.
std::pair<int64_t, int64_t> token_strides(const Tensor &t, const TokenShape &s, int64_t row) {
  if (s.varlen) return {0, outer_stride(t, row)};
  const int64_t st = t.size(1) > 1 ? t.stride(1) : row;
  const int64_t sb = t.size(0) > 1 ? t.stride(0) : s.T * st;
  return {sb, st};
}

void check_index_dtype(const Tensor &idx, const char *name) {
  TORCH_CHECK_TYPE(idx.scalar_type() == at::kInt || idx.scalar_type() == at::kLong, name,
                   ": expected int32 or int64, got ", idx.scalar_type());
}

void check_index_1d(const Tensor &idx, const char *name, int64_t n, const char *what) {
  check_index_dtype(idx, name);
  check_dim(idx, name, 1);
  check_size(idx, name, 0, n, what);
}

mamba_ssu_mtp_params make_mtp_params(const MtpTensors &t, bool dt_softplus, int64_t pad_slot_id,
                                     bool disable_state_update, int64_t cache_steps,
                                     int64_t philox_rounds, int64_t sr_rule) {
  const Tensor &state = t.state;
  check_dim(state, "state", 4);
  const int64_t slots = state.size(0), nheads = state.size(1), dim = state.size(2),
                dstate = state.size(3);
  const bool varlen = t.cu.has_value();

  // Sequences and tokens.
  int64_t batch = 0, ntokens = 0, total_tokens = 0;
  if (varlen) {
    TORCH_CHECK_VALUE(t.x.dim() == 3, "x: the varlen form (cu_seqlens given) expects 3 "
                      "dimensions (total_tokens, nheads, dim), got shape ", t.x.sizes());
    const Tensor &cu = *t.cu;
    check_index_dtype(cu, "cu_seqlens");
    check_dim(cu, "cu_seqlens", 1);
    TORCH_CHECK_VALUE(cu.size(0) >= 2, "cu_seqlens: expected at least 2 offsets (batch + 1), "
                      "got shape ", cu.sizes());
    batch = cu.size(0) - 1;
    total_tokens = t.x.size(0);
    ntokens = cache_steps;
    TORCH_CHECK_VALUE(ntokens >= 1 && ntokens <= MAMBA_SSU_MTP_MAX_TOKENS,
                      "cache_steps: the varlen form needs the longest sequence in 1..=",
                      MAMBA_SSU_MTP_MAX_TOKENS, ", got ", cache_steps);
  } else {
    check_dim(t.x, "x", 4);
    batch = t.x.size(0);
    ntokens = t.x.size(1);
    total_tokens = batch * ntokens;
    TORCH_CHECK_VALUE(batch >= 1, "x: expected at least one sequence (size(0) >= 1), got shape ",
                      t.x.sizes());
    TORCH_CHECK_VALUE(ntokens >= 1 && ntokens <= MAMBA_SSU_MTP_MAX_TOKENS, "x: expected 1..=",
                      MAMBA_SSU_MTP_MAX_TOKENS, " tokens per sequence (size(1)), got shape ",
                      t.x.sizes());
  }
  const TokenShape ts{varlen, t.x.size(0), varlen ? 0 : ntokens};
  const int64_t lead = ts.lead();
  check_size(t.x, "x", lead, nheads, "nheads of state");
  check_size(t.x, "x", lead + 1, dim, "dim of state");
  check_tokens(t.dt, "dt", ts, nheads, "nheads", dim, "dim");
  TORCH_CHECK_VALUE(t.B.dim() == lead + 2, "B: expected ", lead + 2, " dimensions, got shape ",
                    t.B.sizes());
  const int64_t ngroups = t.B.size(lead);
  check_tokens(t.B, "B", ts, -1, "", dstate, "dstate");
  check_tokens(t.C, "C", ts, ngroups, "ngroups of B", dstate, "dstate");
  check_tokens(t.out, "out", ts, nheads, "nheads", dim, "dim");
  if (t.z) check_tokens(*t.z, "z", ts, nheads, "nheads", dim, "dim");
  check_dim(t.A, "A", 3);
  check_size(t.A, "A", 0, nheads, "nheads");
  check_size(t.A, "A", 1, dim, "dim");
  check_size(t.A, "A", 2, dstate, "dstate");
  for (const auto &[opt, name] : {std::pair{&t.D, "D"}, std::pair{&t.dt_bias, "dt_bias"}}) {
    if (!opt->has_value()) continue;
    check_dim(**opt, name, 2);
    check_size(**opt, name, 0, nheads, "nheads");
    check_size(**opt, name, 1, dim, "dim");
  }

  // Index tensors: one integer dtype for all of them (the kernel's index_dtype).
  const optional<Tensor> *first_idx = nullptr;
  const char *first_name = nullptr;
  for (const auto &[opt, name] :
       {std::pair{&t.sbi, "state_batch_indices"}, std::pair{&t.dsbi, "dst_state_batch_indices"},
        std::pair{&t.inter_idx, "intermediate_state_indices"},
        std::pair{&t.nat, "num_accepted_tokens"}, std::pair{&t.cu, "cu_seqlens"}}) {
    if (!opt->has_value()) continue;
    check_index_dtype(**opt, name);
    if (first_idx == nullptr) {
      first_idx = opt;
      first_name = name;
    } else {
      same_dtype(**opt, name, **first_idx, first_name);
    }
  }
  int64_t sbi_cols = 0;
  if (t.sbi) {
    const Tensor &idx = *t.sbi;
    TORCH_CHECK_VALUE(idx.dim() == 1 || idx.dim() == 2, "state_batch_indices: expected 1 or 2 "
                      "dimensions ((batch,) or (batch, T)), got shape ", idx.sizes());
    check_size(idx, "state_batch_indices", 0, batch, "batch");
    if (idx.dim() == 2) {
      sbi_cols = idx.size(1);
      TORCH_CHECK_VALUE(sbi_cols >= 1, "state_batch_indices: a 2-D index needs at least one "
                        "column, got shape ", idx.sizes());
    }
  } else {
    TORCH_CHECK_VALUE(slots >= batch, "state: without state_batch_indices sequence b uses slot "
                      "b: expected size(0) >= ", batch, " (the batch), got shape ",
                      state.sizes());
  }
  if (t.dsbi) {
    const Tensor &idx = *t.dsbi;
    TORCH_CHECK_VALUE(idx.dim() == 2, "dst_state_batch_indices: the multi-token path expects a "
                      "2-D (batch, T) index (one write slot per token), got shape ", idx.sizes());
    check_size(idx, "dst_state_batch_indices", 0, batch, "batch");
    TORCH_CHECK_VALUE(idx.size(1) >= ntokens, "dst_state_batch_indices: expected at least ",
                      ntokens, " columns (one per token", varlen ? ", cache_steps" : "",
                      "), got shape ", idx.sizes());
  }
  if (t.nat) {
    check_index_1d(*t.nat, "num_accepted_tokens", batch, "batch");
    TORCH_CHECK_VALUE(sbi_cols > 0, "num_accepted_tokens: needs a 2-D state_batch_indices "
                      "(batch, T) to pick the read slot from");
  }
  if (t.inter_idx) {
    TORCH_CHECK_VALUE(t.inter.has_value(), "intermediate_state_indices: given without an "
                      "intermediate_states_buffer");
    check_index_1d(*t.inter_idx, "intermediate_state_indices", batch, "batch");
  }
  int64_t steps = ntokens, entries = 0;
  if (t.inter) {
    const Tensor &buf = *t.inter;
    TORCH_CHECK_VALUE(!t.dsbi.has_value(), "intermediate_states_buffer and "
                      "dst_state_batch_indices are mutually exclusive");
    check_dim(buf, "intermediate_states_buffer", 5);
    TORCH_CHECK_VALUE(buf.size(1) == cache_steps, "intermediate_states_buffer: expected "
                      "size(1) == cache_steps (", cache_steps, "), got shape ", buf.sizes());
    TORCH_CHECK_VALUE(cache_steps >= ntokens, "cache_steps: expected >= the tokens per sequence (",
                      ntokens, ") with an intermediate_states_buffer, got ", cache_steps);
    check_size(buf, "intermediate_states_buffer", 2, nheads, "nheads of state");
    check_size(buf, "intermediate_states_buffer", 3, dim, "dim of state");
    check_size(buf, "intermediate_states_buffer", 4, dstate, "dstate of state");
    same_dtype(buf, "intermediate_states_buffer", state, "state");
    const int64_t head_block = nheads * dim * dstate;
    check_stride(buf, "intermediate_states_buffer", 4, 1);
    check_stride(buf, "intermediate_states_buffer", 3, dstate);
    check_stride(buf, "intermediate_states_buffer", 2, dim * dstate);
    check_stride(buf, "intermediate_states_buffer", 1, head_block);
    check_stride(buf, "intermediate_states_buffer", 0, cache_steps * head_block);
    steps = cache_steps;
    entries = buf.size(0);
  }

  const Dtypes dty = check_common(t, state, lead, dim, dstate);
  const int32_t state_dtype = dty.state, input_dtype = dty.input, weight_dtype = dty.weight;
  for (const auto &[opt, name] :
       {std::pair{&t.inter, "intermediate_states_buffer"},
        std::pair{&t.inter_idx, "intermediate_state_indices"},
        std::pair{&t.cu, "cu_seqlens"}, std::pair{&t.nat, "num_accepted_tokens"}})
    if (opt->has_value()) check_device(**opt, name, state);

  mamba_ssu_mtp_params p{};
  p.batch = batch;
  p.ntokens = ntokens;
  p.total_tokens = total_tokens;
  p.nheads = nheads;
  p.dim = dim;
  p.dstate = dstate;
  p.ngroups = ngroups;
  p.state_cache_size = slots;
  p.cache_steps = steps;
  p.intermediate_cache_size = entries;
  p.state_stride_batch = outer_stride(state, nheads * dim * dstate);
  std::tie(p.x_stride_batch, p.x_stride_token) = token_strides(t.x, ts, nheads * dim);
  std::tie(p.dt_stride_batch, p.dt_stride_token) = token_strides(t.dt, ts, nheads);
  std::tie(p.B_stride_batch, p.B_stride_token) = token_strides(t.B, ts, ngroups * dstate);
  std::tie(p.C_stride_batch, p.C_stride_token) = token_strides(t.C, ts, ngroups * dstate);
  if (t.z) std::tie(p.z_stride_batch, p.z_stride_token) = token_strides(*t.z, ts, nheads * dim);
  std::tie(p.out_stride_batch, p.out_stride_token) = token_strides(t.out, ts, nheads * dim);
  if (t.sbi) {
    p.state_batch_indices_stride = outer_stride(*t.sbi, sbi_cols > 0 ? sbi_cols : 1);
    p.state_batch_indices_stride_col = sbi_cols > 1 ? t.sbi->stride(1) : 1;
    p.state_batch_indices_cols = sbi_cols;
  }
  if (t.dsbi) {
    const int64_t cols = t.dsbi->size(1);
    p.dst_state_batch_indices_stride = outer_stride(*t.dsbi, cols);
    p.dst_state_batch_indices_stride_col = cols > 1 ? t.dsbi->stride(1) : 1;
    p.dst_state_batch_indices_cols = cols;
  }
  p.num_accepted_tokens_stride = t.nat ? outer_stride(*t.nat, 1) : 0;
  p.cu_seqlens_stride = t.cu ? outer_stride(*t.cu, 1) : 0;
  p.intermediate_state_indices_stride = t.inter_idx ? outer_stride(*t.inter_idx, 1) : 0;
  p.pad_slot_id = pad_slot_id;
  p.state = state.data_ptr();
  p.x = t.x.const_data_ptr();
  p.dt = t.dt.const_data_ptr();
  p.dt_bias = t.dt_bias ? t.dt_bias->const_data_ptr() : nullptr;
  p.A = static_cast<const float *>(t.A.const_data_ptr());
  p.B = t.B.const_data_ptr();
  p.C = t.C.const_data_ptr();
  p.D = t.D ? t.D->const_data_ptr() : nullptr;
  p.z = t.z ? t.z->const_data_ptr() : nullptr;
  p.out = t.out.data_ptr();
  p.state_batch_indices = t.sbi ? t.sbi->const_data_ptr() : nullptr;
  p.dst_state_batch_indices = t.dsbi ? t.dsbi->const_data_ptr() : nullptr;
  p.num_accepted_tokens = t.nat ? t.nat->const_data_ptr() : nullptr;
  p.cu_seqlens = t.cu ? t.cu->const_data_ptr() : nullptr;
  p.intermediate_states = t.inter ? t.inter->data_ptr() : nullptr;
  p.intermediate_state_indices = t.inter_idx ? t.inter_idx->const_data_ptr() : nullptr;
  p.state_dtype = state_dtype;
  p.input_dtype = input_dtype;
  p.weight_dtype = weight_dtype;
  p.index_dtype = (first_idx != nullptr && (*first_idx)->scalar_type() == at::kLong)
                      ? MAMBA_SSU_I64
                      : MAMBA_SSU_I32;
  p.dt_softplus = dt_softplus ? 1 : 0;
  p.update_state = disable_state_update ? 0 : 1;
  TORCH_CHECK_VALUE(philox_rounds >= 0 && philox_rounds <= 10,
                    "philox_rounds: expected 0..=10, got ", philox_rounds);
  p.philox_rounds = static_cast<int32_t>(philox_rounds);
  TORCH_CHECK_VALUE(sr_rule == MAMBA_SSU_SR_V072 || sr_rule == MAMBA_SSU_SR_V074,
                    "sr_rule: expected 0 (FlashInfer 0.7.2's SR conversion) or 1 (0.7.4's), got ",
                    sr_rule);
  p.sr_rule = static_cast<int32_t>(sr_rule);
  p.seed_source = MAMBA_SSU_SEED_POINTER;
  p.num_sms = num_sms(state.get_device());
  return p;
}

void launch_ssu_mtp(const mamba_ssu_mtp_params &p, const c10::cuda::CUDAStream &stream) {
  check_status(mamba_ssu_selective_state_update_mtp(as_stream(stream), &p),
               "mamba_ssu.selective_state_update");
}

// The multi-token SSU with its seed in device memory (FlashInfer's contract) or no SR.
void ssu_mtp_pointer(Tensor state, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C,
                     optional<Tensor> D, optional<Tensor> z, optional<Tensor> dt_bias,
                     bool dt_softplus, optional<Tensor> state_batch_indices,
                     optional<Tensor> dst_state_batch_indices, int64_t pad_slot_id, Tensor out,
                     bool disable_state_update, optional<Tensor> intermediate_states_buffer,
                     optional<Tensor> intermediate_state_indices, int64_t cache_steps,
                     optional<Tensor> cu_seqlens, optional<Tensor> num_accepted_tokens,
                     optional<Tensor> rand_seed, int64_t philox_rounds, int64_t sr_rule) {
  MtpTensors t{state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices,
               dst_state_batch_indices, out, intermediate_states_buffer,
               intermediate_state_indices, cu_seqlens, num_accepted_tokens};
  mamba_ssu_mtp_params p = make_mtp_params(t, dt_softplus, pad_slot_id, disable_state_update,
                                           cache_steps, rand_seed ? philox_rounds : 0, sr_rule);
  if (rand_seed) {
    check_rand_seed(*rand_seed, state);
    p.rand_seed = static_cast<const int64_t *>(rand_seed->const_data_ptr());
  }
  const c10::cuda::CUDAGuard guard(state.device());
  launch_ssu_mtp(p, c10::cuda::getCurrentCUDAStream(state.get_device()));
}

// ---------------------------------------------------------------------------------------------
// Torch's generator.

at::CUDAGeneratorImpl *default_generator(c10::DeviceIndex device) {
  const at::Generator &g = at::cuda::detail::getDefaultCUDAGenerator(device);
  return at::check_generator<at::CUDAGeneratorImpl>(g);
}

// The stream's capture identity: 0 when it is not being captured.
unsigned long long capture_id(const c10::cuda::CUDAStream &stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  const cudaError_t err = cudaStreamGetCaptureInfo(stream.stream(), &status, &id);
  TORCH_CHECK(err == cudaSuccess, "cudaStreamGetCaptureInfo: ", cudaGetErrorString(err));
  return status == cudaStreamCaptureStatusActive ? id : 0;
}

// One position of torch's generator: exactly what one torch.randint(0, 2**32, (1,)) takes.
struct Position {
  at::PhiloxCudaState st;
  unsigned long long capture = 0;  // capture id of the stream (captured positions only)
};

// The drawn value of a position is fixed by (seed, offset) eagerly, and by (seed pointer, offset
// pointer, intragraph offset) within one capture: these say whether two positions are k draws
// apart in the same sequence.
bool same_sequence(const Position &a, const Position &b) {
  if (a.st.captured_ != b.st.captured_) return false;
  if (!a.st.captured_) return a.st.seed_.val == b.st.seed_.val;
  return a.capture == b.capture && a.st.seed_.ptr == b.st.seed_.ptr &&
         a.st.offset_.ptr == b.st.offset_.ptr;
}

// Offset of `p` counted from `base` in draws (4 per draw), or -1 if not ahead of base.
int64_t draws_after(const Position &base, const Position &p) {
  const uint64_t b = base.st.captured_ ? base.st.offset_intragraph_ : base.st.offset_.val;
  const uint64_t o = p.st.captured_ ? p.st.offset_intragraph_ : p.st.offset_.val;
  if (o < b || (o - b) % 4 != 0 || (o - b) / 4 > (uint64_t{1} << 40)) return -1;
  return static_cast<int64_t>((o - b) / 4);
}

Position take_position(c10::DeviceIndex device, const c10::cuda::CUDAStream &stream,
                       uint64_t draws) {
  Position p;
  at::CUDAGeneratorImpl *gen = default_generator(device);
  {
    std::lock_guard<std::mutex> lock(gen->mutex_);
    p.st = gen->philox_cuda_state(4 * draws);
  }
  if (p.st.captured_) p.capture = capture_id(stream);
  return p;
}

void draw_into(const Tensor &out, const Position &pos, const c10::cuda::CUDAStream &stream) {
  auto *ptr = static_cast<int64_t *>(out.data_ptr());
  const auto n = static_cast<uint32_t>(out.numel());
  if (pos.st.captured_) {
    check_status(mamba_ssu_draw_seeds_graphsafe_pair(as_stream(stream), ptr, n, pos.st.seed_.ptr,
                                                     pos.st.offset_.ptr,
                                                     pos.st.offset_intragraph_),
                 "mamba_ssu.draw_seeds");
  } else {
    check_status(mamba_ssu_draw_seeds(as_stream(stream), ptr, n, pos.st.seed_.val,
                                      pos.st.offset_.val),
                 "mamba_ssu.draw_seeds");
  }
}

// out[k] = the k-th of out.numel() consecutive stock draws; the generator advances by all of
// them (4 per draw), as that many torch.randint(0, 2**32, (1,)) calls would.
void draw_seeds(Tensor out) {
  check_dim(out, "out", 1);
  TORCH_CHECK_TYPE(out.scalar_type() == at::kLong, "out: expected int64, got ", out.scalar_type());
  TORCH_CHECK_VALUE(out.numel() >= 1 && out.numel() <= MAMBA_SSU_MAX_SEEDS_PER_DRAW,
                    "out: expected 1..=", MAMBA_SSU_MAX_SEEDS_PER_DRAW, " elements, got ",
                    out.numel());
  TORCH_CHECK_VALUE(out.stride(0) == 1 || out.numel() == 1, "out: expected a contiguous tensor");
  TORCH_CHECK_VALUE(out.is_cuda(), "out: expected a CUDA tensor, got one on ", out.device());
  const c10::cuda::CUDAGuard guard(out.device());
  const auto stream = c10::cuda::getCurrentCUDAStream(out.get_device());
  draw_into(out, take_position(out.get_device(), stream, static_cast<uint64_t>(out.numel())),
            stream);
}

// ---------------------------------------------------------------------------------------------
// The seed prefetcher of one device.

// Chain buffers of destroyed prefetchers that captured kernels point into: kept for the rest
// of the process, so that a graph replayed after its prefetcher is gone touches live memory.
std::vector<Tensor> &retired_buffers() {
  static auto *v = new std::vector<Tensor>();  // never destroyed (outlives every graph)
  return *v;
}
std::mutex retired_mutex;

class SeedPrefetcher {
 public:
  SeedPrefetcher(int64_t n, int64_t device) : n_(n), device_(static_cast<c10::DeviceIndex>(device)) {
    TORCH_CHECK_VALUE(n >= 1 && n <= MAMBA_SSU_MAX_SEEDS_PER_DRAW,
                      "num_layers: expected 1..=", MAMBA_SSU_MAX_SEEDS_PER_DRAW, ", got ", n);
    TORCH_CHECK_VALUE(device >= 0 && device < c10::cuda::device_count(),
                      "device: expected a CUDA device index below ", c10::cuda::device_count(),
                      ", got ", device);
  }

  // Replaces `torch.randint(0, 2**32, (1,), device=...)`: advances the generator by exactly one
  // draw and returns a one-element int64 tensor holding that draw, taken from a batched draw of
  // N positions made when none of the held batch's positions matched (first call, other RNG
  // use beyond the batch, another seed, a capture boundary, another stream).
  Tensor next_seed() {
    const auto stream = c10::cuda::getCurrentCUDAStream(device_);
    const Position pos = take_position(device_, stream, 1);
    ++stats_.requested;
    if (batch_.defined() && stream == batch_stream_ && same_sequence(batch_pos_, pos)) {
      const int64_t k = draws_after(batch_pos_, pos);
      if (k >= 0 && k < n_) {
        ++stats_.served;
        return batch_.narrow(0, k, 1);
      }
    }
    const c10::cuda::CUDAGuard guard(device_);
    Tensor batch = at::empty({n_}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA, device_));
    draw_into(batch, pos, stream);
    batch_ = batch;
    batch_pos_ = pos;
    batch_stream_ = stream;
    ++stats_.batches;
    ++stats_.served;
    return batch_.narrow(0, 0, 1);
  }

  // Opens a forward in which fused SSU calls are chained: the first call derives its seed in
  // the kernel, and every call also stores the next call's seed (one extra thread block) into
  // a per-forward buffer that the next call reads as its rand_seed. A call whose position does
  // not follow the previous one (other RNG use, another stream, a failed launch) derives its
  // own seed again, so values are always the stock sequence.
  void begin_fused_forward() {
    TORCH_CHECK(!in_forward_, "begin_fused_forward: a fused forward is already open");
    const c10::cuda::CUDAGuard guard(device_);
    links_ = at::empty({n_}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA, device_));
    in_forward_ = true;
    calls_ = 0;
    chain_valid_ = false;
  }

  // Closes the fused forward; returns the number of calls it served.
  int64_t end_fused_forward() {
    TORCH_CHECK(in_forward_, "end_fused_forward: no fused forward is open");
    in_forward_ = false;
    chain_valid_ = false;
    links_ = Tensor();
    return calls_;
  }

  bool in_fused_forward() const { return in_forward_; }

  // The fused SSU: the kernel derives this call's stock seed itself (no seed kernel); the
  // generator advances by one draw.
  void ssu_fused(Tensor state, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C,
                 optional<Tensor> D, optional<Tensor> z, optional<Tensor> dt_bias,
                 bool dt_softplus, optional<Tensor> state_batch_indices,
                 optional<Tensor> dst_state_batch_indices, int64_t pad_slot_id, Tensor out,
                 bool disable_state_update, int64_t philox_rounds, int64_t algorithm,
                 int64_t sr_rule) {
    check_fused_rounds(philox_rounds);
    SsuTensors t{state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices,
                 dst_state_batch_indices, out};
    mamba_ssu_params p = make_params(t, dt_softplus, pad_slot_id, disable_state_update,
                                     philox_rounds, algorithm, sr_rule);
    fused_launch(p, state, &mamba_ssu_selective_state_update_check, &launch_ssu);
  }

  // The fused multi-token SSU: the same seed handling (one draw per call, chained inside a
  // fused forward) over the multi-token kernel.
  void ssu_fused_mtp(Tensor state, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C,
                     optional<Tensor> D, optional<Tensor> z, optional<Tensor> dt_bias,
                     bool dt_softplus, optional<Tensor> state_batch_indices,
                     optional<Tensor> dst_state_batch_indices, int64_t pad_slot_id, Tensor out,
                     bool disable_state_update, optional<Tensor> intermediate_states_buffer,
                     optional<Tensor> intermediate_state_indices, int64_t cache_steps,
                     optional<Tensor> cu_seqlens, optional<Tensor> num_accepted_tokens,
                     int64_t philox_rounds, int64_t sr_rule) {
    check_fused_rounds(philox_rounds);
    MtpTensors t{state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices,
                 dst_state_batch_indices, out, intermediate_states_buffer,
                 intermediate_state_indices, cu_seqlens, num_accepted_tokens};
    mamba_ssu_mtp_params p = make_mtp_params(t, dt_softplus, pad_slot_id, disable_state_update,
                                             cache_steps, philox_rounds, sr_rule);
    fused_launch(p, state, &mamba_ssu_selective_state_update_mtp_check, &launch_ssu_mtp);
  }

  ~SeedPrefetcher() {
    if (keepalive_.empty()) return;
    std::lock_guard<std::mutex> lock(retired_mutex);
    for (auto &t : keepalive_) retired_buffers().push_back(std::move(t));
  }

  int64_t num_layers() const { return n_; }
  int64_t device() const { return device_; }
  // Counters: next_seed/fused requests, requests served from a batch or chain link, batches drawn.
  py::dict stats() const {
    py::dict d;
    d["requested"] = stats_.requested;
    d["served"] = stats_.served;
    d["batches"] = stats_.batches;
    return d;
  }

 private:
  static void check_fused_rounds(int64_t philox_rounds) {
    TORCH_CHECK_VALUE(philox_rounds >= 1 && philox_rounds <= 10,
                      "philox_rounds: expected 1..=10 with a fused seed, got ", philox_rounds);
  }

  // Fills the seed fields of a checked parameter block (single- or multi-token: the fields
  // have the same names and meaning) from this call's generator position and launches it:
  // the kernel derives the stock seed itself, or reads it from the previous chained call's
  // link. Everything is checked before the generator moves: a rejected call draws nothing.
  template <class P>
  void fused_launch(P &p, const Tensor &state, int (*check)(const P *),
                    void (*launch)(const P &, const c10::cuda::CUDAStream &)) {
    TORCH_CHECK_VALUE(state.get_device() == device_, "state: the seed prefetcher serves cuda:",
                      static_cast<int>(device_), ", got a tensor on ", state.device());
    p.seed_source = MAMBA_SSU_SEED_FROM_VALUES;
    check_status(check(&p), "mamba_ssu.selective_state_update");
    const c10::cuda::CUDAGuard guard(device_);
    const auto stream = c10::cuda::getCurrentCUDAStream(device_);
    const Position pos = take_position(device_, stream, 1);
    ++stats_.requested;
    if (pos.st.captured_) {
      p.seed_source = MAMBA_SSU_SEED_FROM_GENERATOR;
      p.generator_seed_ptr = pos.st.seed_.ptr;
      p.generator_offset_ptr = pos.st.offset_.ptr;
      p.seed_offset = pos.st.offset_intragraph_;
    } else {
      p.seed_source = MAMBA_SSU_SEED_FROM_VALUES;
      p.generator_seed = pos.st.seed_.val;
      p.seed_offset = pos.st.offset_.val;
    }
    int64_t k = -1;  // this call's link in the forward's chain
    if (in_forward_ && calls_ < n_) k = calls_;
    if (in_forward_) ++calls_;
    if (k >= 0) {
      // Chained when this call is the draw right after the previous chained call's.
      const bool follows = chain_valid_ && k > 0 && stream == chain_stream_ &&
                           same_sequence(chain_pos_, pos) && draws_after(chain_pos_, pos) == 1;
      auto *links = static_cast<int64_t *>(links_.data_ptr());
      if (follows) {
        p.seed_source = MAMBA_SSU_SEED_POINTER;
        p.rand_seed = links + k;
        ++stats_.served;
      }
      if (k + 1 < n_) p.seed_next = links + k + 1;
      chain_valid_ = false;  // until this launch is known enqueued
      // A graph captured here keeps raw pointers into links_: it must outlive the forward.
      if (pos.st.captured_ && (keepalive_.empty() || !keepalive_.back().is_same(links_)))
        keepalive_.push_back(links_);
    }
    launch(p, stream);
    if (k >= 0) {
      chain_valid_ = true;
      chain_pos_ = pos;
      chain_stream_ = stream;
    }
  }

  int64_t n_;
  c10::DeviceIndex device_;
  Tensor batch_;
  Position batch_pos_;
  std::optional<c10::cuda::CUDAStream> batch_stream_;

  bool in_forward_ = false;
  bool chain_valid_ = false;
  int64_t calls_ = 0;
  Tensor links_;
  Position chain_pos_;
  std::optional<c10::cuda::CUDAStream> chain_stream_;
  // Chain buffers that captured kernels point into (kept for the prefetcher's lifetime, then
  // retired: see retired_buffers).
  std::vector<Tensor> keepalive_;

  struct {
    int64_t requested = 0, served = 0, batches = 0;
  } stats_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Torch ops (for torch.compile; fake implementations in mamba_ssu/_ops.py).

TORCH_LIBRARY(mamba_ssu, m) {
  m.def(
      "selective_state_update(Tensor(a!) state, Tensor x, Tensor dt, Tensor A, Tensor B, "
      "Tensor C, Tensor? D, Tensor? z, Tensor? dt_bias, bool dt_softplus, "
      "Tensor? state_batch_indices, Tensor? dst_state_batch_indices, int pad_slot_id, "
      "Tensor(b!) out, bool disable_state_update, Tensor? rand_seed, int philox_rounds, "
      "int algorithm, int sr_rule=0) -> ()");
  m.def(
      "selective_state_update_mtp(Tensor(a!) state, Tensor x, Tensor dt, Tensor A, Tensor B, "
      "Tensor C, Tensor? D, Tensor? z, Tensor? dt_bias, bool dt_softplus, "
      "Tensor? state_batch_indices, Tensor? dst_state_batch_indices, int pad_slot_id, "
      "Tensor(b!) out, bool disable_state_update, Tensor(c!)? intermediate_states_buffer, "
      "Tensor? intermediate_state_indices, int cache_steps, Tensor? cu_seqlens, "
      "Tensor? num_accepted_tokens, Tensor? rand_seed, int philox_rounds, int sr_rule=0) -> ()");
  m.def("draw_seeds(Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(mamba_ssu, CUDA, m) {
  m.impl("selective_state_update", &ssu_pointer);
  m.impl("selective_state_update_mtp", &ssu_mtp_pointer);
  m.impl("draw_seeds", &draw_seeds);
}

// ---------------------------------------------------------------------------------------------
// The Python module: direct calls (no dispatcher on the hot path) for eager and graph capture.

PYBIND11_MODULE(_C, m) {
  m.doc() = "mamba-ssu's torch binding (use the mamba_ssu package, not this module)";
  m.def("selective_state_update", &ssu_pointer, "SSU, seed in device memory or no SR");
  m.def("selective_state_update_mtp", &ssu_mtp_pointer,
        "multi-token SSU, seed in device memory or no SR");
  m.def("draw_seeds", &draw_seeds, "n consecutive stock torch.randint draws into out");
  py::class_<SeedPrefetcher>(m, "SeedPrefetcher")
      .def(py::init<int64_t, int64_t>(), py::arg("num_layers"), py::arg("device"))
      .def("next_seed", &SeedPrefetcher::next_seed)
      .def("begin_fused_forward", &SeedPrefetcher::begin_fused_forward)
      .def("end_fused_forward", &SeedPrefetcher::end_fused_forward)
      .def("in_fused_forward", &SeedPrefetcher::in_fused_forward)
      .def("ssu_fused", &SeedPrefetcher::ssu_fused)
      .def("ssu_fused_mtp", &SeedPrefetcher::ssu_fused_mtp)
      .def("stats", &SeedPrefetcher::stats)
      .def_property_readonly("num_layers", &SeedPrefetcher::num_layers)
      .def_property_readonly("device", &SeedPrefetcher::device);
  m.attr("MAX_SEEDS_PER_DRAW") = MAMBA_SSU_MAX_SEEDS_PER_DRAW;
  m.attr("MTP_MAX_TOKENS") = MAMBA_SSU_MTP_MAX_TOKENS;
}
