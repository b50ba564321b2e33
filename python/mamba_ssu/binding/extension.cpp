// extension.cpp — the torch binding of mamba-ssu: a host-compiler translation unit over the
// crate's C ABI (csrc/include/mamba_ssu.h), linked with the crate's static library and torch's
// shared CUDA runtime.
//
// What it provides:
//   - `_C.selective_state_update(...)` / op `mamba_ssu::selective_state_update`: FlashInfer
//     0.7.2's arguments (both the single- and the multi-token forms, plus sr_rule) as torch holds
//     them, mapped onto one mamba_ssu_args (a descriptor per tensor: its dtype tag, shape and
//     strides as torch has them, rank 0 when absent) and handed to the C contract, which owns
//     every rule on shapes, dtypes, strides, forms and options (mamba_ssu_check /
//     mamba_ssu_launch). What only torch can see is checked here: the seed tensor's element count
//     and dtype (before the C check, where FlashInfer's Python checks them) and the devices
//     (after it). The kernel goes to torch's current stream of the state's device under a device
//     guard. The same function is the op's CUDA kernel (TORCH_LIBRARY, for torch.compile).
//   - `_C.check(...)`: the same arguments through the same descriptors, with placeholder data
//     pointers, checked by mamba_ssu_check only (no device is touched): the op's fake
//     implementation (mamba_ssu/_ops.py) runs it on meta tensors, so that tracing rejects what the
//     kernel would. Returns the checked problem (a dict), or None when a size is symbolic.
//   - `_C.draw_seeds(out)` / op `mamba_ssu::draw_seeds`: n consecutive stock
//     `torch.randint(0, 2**32, (1,))` draws from the device's default CUDA generator in one
//     launch (graph-safe: under capture it reads the generator's device state).
//   - `_C.counter_seeds(counter, n, out)` / op `mamba_ssu::counter_seeds`: TensorRT-LLM's device
//     counter, a forward's n increment-then-read steps in one launch (mamba_ssu_counter_seeds).
//   - `_C.SeedPrefetcher`: per device, `next_seed()` replaces the per-layer `torch.randint` (one
//     batched draw per N calls), and the fused path (the SSU derives the stock seed itself),
//     per call or chained over a delimited forward by the crate's C prefetcher.
//
// Every C status becomes a Python exception through ONE table (kStatusClasses); the extension's
// own checks raise through it as well, each with the status whose class FlashInfer raises for
// that kind of problem.
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
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mamba_ssu.h"

namespace {

using at::Tensor;
using std::optional;

// ---------------------------------------------------------------------------------------------
// Errors: the one table from a C status to the Python exception class.

enum class PyClass { kRuntimeError, kValueError, kNotImplementedError };

struct StatusClass {
  int status;
  PyClass cls;
};

// FlashInfer raises RuntimeError from its C++ checks (shapes, dtypes, strides, devices: the
// contract's INVALID_ARGUMENT), ValueError from its Python checks (option values and conflicts,
// the seed tensor: INVALID_VALUE); what this crate does not serve is NotImplementedError. A CUDA
// failure or a misused prefetcher scope is a RuntimeError; so is a status not listed here.
constexpr StatusClass kStatusClasses[] = {
    {MAMBA_SSU_ERROR_INVALID_ARGUMENT, PyClass::kRuntimeError},
    {MAMBA_SSU_ERROR_INVALID_VALUE, PyClass::kValueError},
    {MAMBA_SSU_ERROR_UNSUPPORTED, PyClass::kNotImplementedError},
    {MAMBA_SSU_ERROR_CUDA, PyClass::kRuntimeError},
    {MAMBA_SSU_ERROR_SCOPE, PyClass::kRuntimeError},
};

// The table as Python sees it ({status: exception class}; `_C.status_classes()`), for tests
// and for callers that map a status themselves.
py::dict status_classes() {
  py::dict d;
  for (const StatusClass &e : kStatusClasses) {
    PyObject *cls = e.cls == PyClass::kValueError            ? PyExc_ValueError
                    : e.cls == PyClass::kNotImplementedError ? PyExc_NotImplementedError
                                                             : PyExc_RuntimeError;
    d[py::int_(e.status)] = py::handle(cls);
  }
  return d;
}

PyClass class_of(int status) {
  for (const StatusClass &e : kStatusClasses) {
    if (e.status == status) return e.cls;
  }
  return PyClass::kRuntimeError;
}

// Raises `message` as the class of `status` (a C status, or the one whose class a check of the
// extension's own takes).
[[noreturn]] void raise_as(int status, const std::string &message) {
  switch (class_of(status)) {
    case PyClass::kValueError:
      TORCH_CHECK_VALUE(false, message);
    case PyClass::kNotImplementedError:
      TORCH_CHECK_NOT_IMPLEMENTED(false, message);
    case PyClass::kRuntimeError:
      break;
  }
  TORCH_CHECK(false, message);
}

// A failed C call: the detail (it begins with the argument it names), then the entry point and
// the status.
[[noreturn]] void raise_status(int status, const char *what) {
  std::string detail = mamba_ssu_last_error_detail();
  if (detail.empty()) detail = mamba_ssu_status_string(status);
  raise_as(status, detail + " (" + what + ": " + mamba_ssu_status_string(status) + ")");
}

void check_status(int status, const char *what) {
  if (status != MAMBA_SSU_SUCCESS) raise_status(status, what);
}

// The extension's own checks raise with the class FlashInfer gives that kind of problem: a
// device as its C++ checks do, the seed tensor's element count, dtype and device as its Python
// checks do.
constexpr int kDeviceProblem = MAMBA_SSU_ERROR_INVALID_ARGUMENT;
constexpr int kSeedTensorProblem = MAMBA_SSU_ERROR_INVALID_VALUE;

mamba_ssu_stream_t as_stream(const c10::cuda::CUDAStream &s) {
  return reinterpret_cast<mamba_ssu_stream_t>(s.stream());
}

// A value for an int32 field of the C ABI: saturated, so that an out-of-range Python int stays
// out of range (and is rejected by the C check) instead of wrapping into a valid one.
int32_t sat32(int64_t v) {
  if (v > std::numeric_limits<int32_t>::max()) return std::numeric_limits<int32_t>::max();
  if (v < std::numeric_limits<int32_t>::min()) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(v);
}

// A count for a uint32 argument of the C ABI, saturated likewise (negative: 0).
uint32_t sat_u32(int64_t v) {
  if (v < 0) return 0;
  if (v > std::numeric_limits<uint32_t>::max()) return std::numeric_limits<uint32_t>::max();
  return static_cast<uint32_t>(v);
}

// The multiprocessor count of a device, queried once per device (ALGO_AUTO and grid sizing).
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
// Tensor descriptors.

// Torch's dtypes that the C ABI has a tag for.
constexpr std::pair<at::ScalarType, int32_t> kDtypeTags[] = {
    {at::kFloat, MAMBA_SSU_F32}, {at::kHalf, MAMBA_SSU_F16}, {at::kBFloat16, MAMBA_SSU_BF16},
    {at::kInt, MAMBA_SSU_I32},   {at::kLong, MAMBA_SSU_I64}, {at::kShort, MAMBA_SSU_I16},
};

int32_t dtype_tag(at::ScalarType t) {
  for (const auto &[type, tag] : kDtypeTags) {
    if (type == t) return tag;
  }
  return MAMBA_SSU_DTYPE_OTHER;  // the C check rejects it, naming the tensor
}

// Where a descriptor's data pointer comes from: the tensor's own for CUDA tensors (the only ones
// ever launched), else a placeholder. A placeholder is what a CUDA caching-allocator block would
// give (a distinct, 4 GiB-aligned base per argument) plus the tensor's storage offset, so that
// the C check sees the alignment a CUDA tensor of that view would have. `check` uses
// placeholders for every tensor (meta and fake tensors have no data).
enum class Pointers { kOwnOnCuda, kPlaceholders };

constexpr uintptr_t kPlaceholderStride = uintptr_t{1} << 32;

class Descriptors {
 public:
  explicit Descriptors(Pointers mode) : mode_(mode) {}

  // The descriptor of argument `name` (absent: rank 0). A size, stride or offset that is
  // symbolic (torch.compile's dynamic shapes) leaves the descriptor incomplete: symbolic()
  // then says so.
  mamba_ssu_tensor operator()(const optional<Tensor> &t, const char *name) {
    return describe(t ? &*t : nullptr, name);
  }

  // The data pointer of the next argument (absent: null).
  void *pointer(const optional<Tensor> &t) { return pointer_of(t ? &*t : nullptr); }

  bool symbolic() const { return symbolic_; }

  // The first argument given as a 0-dimensional tensor (nullptr: none). Its descriptor is a
  // stand-in (rank 1, one element, stride 0): present, as FlashInfer's Python checks see it.
  const char *zero_dim() const { return zero_dim_; }

 private:
  mamba_ssu_tensor describe(const Tensor *t, const char *name) {
    mamba_ssu_tensor d{};
    if (t == nullptr) {
      ++count_;
      return d;
    }
    const int64_t rank = t->dim();
    // A descriptor of rank 0 means "absent": a present 0-dimensional tensor cannot be passed
    // (reject_zero_dim); a stand-in keeps it present for the checks that come first.
    if (rank == 0) {
      if (zero_dim_ == nullptr) zero_dim_ = name;
      d.dtype = dtype_tag(t->scalar_type());
      d.rank = 1;
      d.shape[0] = 1;
      d.strides[0] = 0;
      d.data = pointer_of(t);
      return d;
    }
    d.dtype = dtype_tag(t->scalar_type());
    d.rank = static_cast<int32_t>(rank);  // above MAMBA_SSU_MAX_RANK: the C check rejects it
    const auto sizes = t->sym_sizes();
    const auto strides = t->sym_strides();
    for (int64_t k = 0; k < rank && k < MAMBA_SSU_MAX_RANK; ++k) {
      d.shape[k] = concrete(sizes[k]);
      d.strides[k] = concrete(strides[k]);
    }
    d.data = pointer_of(t);
    return d;
  }

  void *pointer_of(const Tensor *t) {
    const uintptr_t base = kPlaceholderStride * ++count_;
    if (t == nullptr) return nullptr;
    if (mode_ == Pointers::kOwnOnCuda && t->is_cuda()) return t->data_ptr();
    const int64_t offset = concrete(t->sym_storage_offset());
    return reinterpret_cast<void *>(base + static_cast<uintptr_t>(offset) *
                                               static_cast<uintptr_t>(t->element_size()));
  }

  int64_t concrete(const c10::SymInt &s) {
    if (auto v = s.maybe_as_int()) return *v;
    symbolic_ = true;
    return 0;
  }

  Pointers mode_;
  uintptr_t count_ = 0;
  bool symbolic_ = false;
  const char *zero_dim_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// One SSU call: FlashInfer's arguments (the op's schema, in its order).

struct SsuCall {
  // Every tensor is held as optional: the required ones (state, x, dt, A, B, C, out) are always
  // present, so that one table (kTensorArgs) can name them all.
  optional<Tensor> state, x, dt, A, B, C, D, z, dt_bias;
  bool dt_softplus;
  optional<Tensor> state_batch_indices;
  int64_t pad_slot_id;
  optional<Tensor> state_scale, out;
  bool disable_state_update;
  optional<Tensor> intermediate_states_buffer, intermediate_state_indices,
      intermediate_state_scales, rand_seed;
  int64_t philox_rounds, cache_steps, algorithm;
  optional<Tensor> dst_state_batch_indices, cu_seqlens, num_accepted_tokens;
  int64_t sr_rule;

};

// Every tensor argument but the seed: FlashInfer's name, where the call holds it, and its
// descriptor in mamba_ssu_args (FlashInfer's order: the device check reports the first).
struct TensorArg {
  const char *name;
  optional<Tensor> SsuCall::*call;
  mamba_ssu_tensor mamba_ssu_args::*args;
};

constexpr TensorArg kTensorArgs[] = {
    {"state", &SsuCall::state, &mamba_ssu_args::state},
    {"x", &SsuCall::x, &mamba_ssu_args::x},
    {"dt", &SsuCall::dt, &mamba_ssu_args::dt},
    {"A", &SsuCall::A, &mamba_ssu_args::A},
    {"B", &SsuCall::B, &mamba_ssu_args::B},
    {"C", &SsuCall::C, &mamba_ssu_args::C},
    {"D", &SsuCall::D, &mamba_ssu_args::D},
    {"z", &SsuCall::z, &mamba_ssu_args::z},
    {"dt_bias", &SsuCall::dt_bias, &mamba_ssu_args::dt_bias},
    {"state_batch_indices", &SsuCall::state_batch_indices, &mamba_ssu_args::state_batch_indices},
    {"state_scale", &SsuCall::state_scale, &mamba_ssu_args::state_scale},
    {"out", &SsuCall::out, &mamba_ssu_args::out},
    {"intermediate_states_buffer", &SsuCall::intermediate_states_buffer,
     &mamba_ssu_args::intermediate_states},
    {"intermediate_state_indices", &SsuCall::intermediate_state_indices,
     &mamba_ssu_args::intermediate_state_indices},
    {"intermediate_state_scales", &SsuCall::intermediate_state_scales,
     &mamba_ssu_args::intermediate_state_scales},
    {"dst_state_batch_indices", &SsuCall::dst_state_batch_indices,
     &mamba_ssu_args::dst_state_batch_indices},
    {"cu_seqlens", &SsuCall::cu_seqlens, &mamba_ssu_args::cu_seqlens},
    {"num_accepted_tokens", &SsuCall::num_accepted_tokens, &mamba_ssu_args::num_accepted_tokens},
};

// Wraps Fn(pre..., const SsuCall &) as a function of the op's parameter list, written once here
// for every entry point that takes the call (the op's kernel, the check, the fused call).
template <auto Fn, class... Pre>
auto ssu_entry() {
  return [](Pre... pre, Tensor state, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C,
            optional<Tensor> D, optional<Tensor> z, optional<Tensor> dt_bias, bool dt_softplus,
            optional<Tensor> state_batch_indices, int64_t pad_slot_id,
            optional<Tensor> state_scale, Tensor out, bool disable_state_update,
            optional<Tensor> intermediate_states_buffer,
            optional<Tensor> intermediate_state_indices,
            optional<Tensor> intermediate_state_scales, optional<Tensor> rand_seed,
            int64_t philox_rounds, int64_t cache_steps, int64_t algorithm,
            optional<Tensor> dst_state_batch_indices, optional<Tensor> cu_seqlens,
            optional<Tensor> num_accepted_tokens, int64_t sr_rule) {
    return Fn(pre..., SsuCall{std::move(state), std::move(x), std::move(dt), std::move(A),
                              std::move(B), std::move(C), std::move(D), std::move(z),
                              std::move(dt_bias), dt_softplus, std::move(state_batch_indices),
                              pad_slot_id, std::move(state_scale), std::move(out),
                              disable_state_update, std::move(intermediate_states_buffer),
                              std::move(intermediate_state_indices),
                              std::move(intermediate_state_scales), std::move(rand_seed),
                              philox_rounds, cache_steps, algorithm,
                              std::move(dst_state_batch_indices), std::move(cu_seqlens),
                              std::move(num_accepted_tokens), sr_rule});
  };
}

// A call with a 0-dimensional tensor argument (`name`), which no descriptor can hold: what
// FlashInfer's Python layer would refuse first (the C check's option values and conflicts,
// INVALID_VALUE, run with the tensor present), else the tensor itself (FlashInfer's C++ checks
// refuse its rank: RuntimeError).
[[noreturn]] void reject_zero_dim(const mamba_ssu_args &a, const char *name) {
  const int s = mamba_ssu_check(&a, nullptr);
  if (s == MAMBA_SSU_ERROR_INVALID_VALUE) raise_status(s, "mamba_ssu.selective_state_update");
  raise_as(MAMBA_SSU_ERROR_INVALID_ARGUMENT,
           std::string(name) + ": got a 0-dimensional tensor (a tensor argument has 1 to " +
               std::to_string(MAMBA_SSU_MAX_RANK) + " dimensions)");
}

// The call as one mamba_ssu_args. The seed: FlashInfer's rand_seed tensor (MODE_POINTER) or none
// (MODE_NONE: rounds not read); the fused path replaces it. Returns false when a size is
// symbolic (the descriptors are then incomplete). A 0-dimensional tensor argument is refused
// here (reject_zero_dim), except where `zero_dim` takes its name (the fused path refuses it once
// its seed is set).
bool to_args(const SsuCall &c, Pointers mode, mamba_ssu_args *a, const char **zero_dim = nullptr) {
  Descriptors desc(mode);
  *a = mamba_ssu_args{};
  for (const TensorArg &t : kTensorArgs) a->*t.args = desc(c.*t.call, t.name);
  // The seed tensor is a pointer to its one element (any shape: FlashInfer counts elements).
  const void *seed = desc.pointer(c.rand_seed);
  a->pad_slot_id = c.pad_slot_id;
  a->cache_steps = c.cache_steps;
  a->dt_softplus = c.dt_softplus ? 1 : 0;
  a->disable_state_update = c.disable_state_update ? 1 : 0;
  a->algorithm = sat32(c.algorithm);
  a->form = MAMBA_SSU_FORM_AUTO;
  a->num_sms = 0;  // the launch sets the device's count
  a->seed.mode = c.rand_seed ? MAMBA_SSU_SEED_MODE_POINTER : MAMBA_SSU_SEED_MODE_NONE;
  a->seed.rounds = sat32(c.philox_rounds);
  a->seed.rule = sat32(c.sr_rule);
  a->seed.pointer = static_cast<const int64_t *>(seed);
  if (desc.zero_dim() != nullptr) {
    if (zero_dim == nullptr) reject_zero_dim(*a, desc.zero_dim());
    *zero_dim = desc.zero_dim();
  }
  return !desc.symbolic();
}

// The seed tensor as FlashInfer's Python checks it before anything else: one element of dtype
// int64, and (`on_device`: the kernel's path) a CUDA tensor, before the C check (which holds
// FlashInfer's other Python checks: a seed with a state_scale, philox_rounds <= 0). Meta and
// fake tensors have the element count and dtype, so tracing checks them too; the check of a
// call's descriptors (`_C.check`, the fake implementation) takes a seed on any device.
void check_seed_tensor(const SsuCall &c, bool on_device) {
  if (!c.rand_seed) return;
  const Tensor &s = *c.rand_seed;
  const auto numel = s.sym_numel().maybe_as_int();
  if (numel && *numel != 1)
    raise_as(kSeedTensorProblem, "rand_seed: expected a single-element tensor, got numel=" +
                                     std::to_string(*numel));
  if (s.scalar_type() != at::kLong)
    raise_as(kSeedTensorProblem,
             std::string("rand_seed: expected dtype int64, got ") + c10::toString(s.scalar_type()));
  if (on_device && !s.is_cuda())
    raise_as(kSeedTensorProblem,
             "rand_seed: expected a CUDA tensor, got one on " + s.device().str());
}

// A problem the C contract cannot see.
struct Rejection {
  int status;  // the C status whose class it raises as
  std::string message;
};

// The devices, in FlashInfer's order: the seed tensor a CUDA tensor (its Python check), then
// every tensor on the state's CUDA device, the seed tensor included. `seed_device` (the fused
// path): the device the seed's prefetcher serves.
optional<Rejection> device_problem(const SsuCall &c, optional<c10::Device> seed_device = {}) {
  if (c.rand_seed && !c.rand_seed->is_cuda())
    return Rejection{kSeedTensorProblem, "rand_seed: expected a CUDA tensor, got one on " +
                                             c.rand_seed->device().str()};
  if (!c.state->is_cuda())
    return Rejection{kDeviceProblem,
                     "state: expected a CUDA tensor, got one on " + c.state->device().str()};
  const c10::Device dev = c.state->device();
  for (const TensorArg &t : kTensorArgs) {
    const optional<Tensor> &tensor = c.*t.call;
    if (tensor && tensor->device() != dev)
      return Rejection{kDeviceProblem, std::string(t.name) + ": expected a tensor on " +
                                           dev.str() + " (the device of state), got one on " +
                                           tensor->device().str()};
  }
  if (c.rand_seed && c.rand_seed->device() != dev)
    return Rejection{kSeedTensorProblem, "rand_seed: expected a tensor on " + dev.str() +
                                             " (the device of state), got one on " +
                                             c.rand_seed->device().str()};
  if (seed_device && *seed_device != dev)
    return Rejection{kSeedTensorProblem, "rand_seed: the FusedSeed's prefetcher serves " +
                                             seed_device->str() + ", state is on " + dev.str()};
  return {};
}

constexpr const char *kSsu = "mamba_ssu.selective_state_update";

// A call the devices reject: the C contract's rejection comes first (what check(...) says about
// the same call), then the device's.
[[noreturn]] void reject_devices(const mamba_ssu_args &a, const Rejection &r) {
  check_status(mamba_ssu_check(&a, nullptr), kSsu);
  raise_as(r.status, r.message);
}

// The SSU with FlashInfer's seed (a tensor read by the kernel) or none: the op's kernel. The
// order is: the seed tensor, the C contract, the devices, the launch. A call whose devices are
// right goes straight to mamba_ssu_launch, which makes the C check itself.
void ssu(const SsuCall &c) {
  check_seed_tensor(c, true);
  mamba_ssu_args a;
  to_args(c, Pointers::kOwnOnCuda, &a);
  if (const auto r = device_problem(c)) reject_devices(a, *r);
  const c10::cuda::CUDAGuard guard(c.state->device());
  a.num_sms = num_sms(c.state->get_device());
  check_status(mamba_ssu_launch(as_stream(c10::cuda::getCurrentCUDAStream(c.state->get_device())),
                                &a),
               kSsu);
}

// mamba_ssu_check on the call's descriptors with placeholder pointers (no device touched): raises
// what the contract rejects (and the seed tensor's problems), else returns the problem as a
// dict; None when a size is symbolic (nothing can be checked before the sizes are known).
py::object check(const SsuCall &c) {
  check_seed_tensor(c, false);
  mamba_ssu_args a;
  if (!to_args(c, Pointers::kPlaceholders, &a)) return py::none();
  mamba_ssu_problem p{};
  check_status(mamba_ssu_check(&a, &p), kSsu);
  py::dict d;
  d["form"] = p.form == MAMBA_SSU_FORM_MULTI ? "multi" : "single";
  d["varlen"] = p.varlen != 0;
  d["batch"] = p.batch;
  d["ntokens"] = p.ntokens;
  d["total_tokens"] = p.total_tokens;
  d["nheads"] = p.nheads;
  d["dim"] = p.dim;
  d["dstate"] = p.dstate;
  d["ngroups"] = p.ngroups;
  d["state_cache_size"] = p.state_cache_size;
  d["cache_steps"] = p.cache_steps;
  d["intermediate_cache_size"] = p.intermediate_cache_size;
  d["stochastic_rounding"] = p.stochastic_rounding != 0;
  return std::move(d);
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

  // The C ABI's form: the values eagerly; the generator's two device words plus the
  // intragraph offset under capture.
  mamba_ssu_position c_position() const {
    mamba_ssu_position p{};
    if (st.captured_) {
      p.seed_ptr = st.seed_.ptr;
      p.offset_ptr = st.offset_.ptr;
      p.offset = st.offset_intragraph_;
    } else {
      p.seed = st.seed_.val;
      p.offset = st.offset_.val;
    }
    return p;
  }
};

// The drawn value of a position is fixed by (seed, offset) eagerly, and by (seed pointer, offset
// pointer, intragraph offset) within one capture: these say whether two positions are k draws
// apart in the same sequence (next_seed's batches).
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

// Whether a tensor's sizes or strides are symbolic (a fake tensor under torch.compile's dynamic
// shapes): its checks then wait for the kernel.
bool symbolic(const Tensor &t) {
  for (const auto &s : t.sym_sizes())
    if (!s.maybe_as_int()) return true;
  for (const auto &s : t.sym_strides())
    if (!s.maybe_as_int()) return true;
  return false;
}

// draw_seeds' out as torch holds it (no device needed: the kernel and the fake implementation
// run it): one dimension, int64, 1..=MAMBA_SSU_MAX_SEEDS_PER_DRAW contiguous elements. The
// element count's range is the C launcher's rule, checked here as well because the generator's
// position must be taken (and so advanced) before the launch: a rejected call draws nothing.
void check_draw_seeds(const Tensor &out) {
  TORCH_CHECK_VALUE(out.dim() == 1, "out: expected 1 dimensions, got ", out.dim());
  TORCH_CHECK_TYPE(out.scalar_type() == at::kLong, "out: expected int64, got ", out.scalar_type());
  if (symbolic(out)) return;
  TORCH_CHECK_VALUE(out.numel() >= 1 && out.numel() <= MAMBA_SSU_MAX_SEEDS_PER_DRAW,
                    "out: expected 1..=", MAMBA_SSU_MAX_SEEDS_PER_DRAW, " elements, got ",
                    out.numel());
  TORCH_CHECK_VALUE(out.stride(0) == 1 || out.numel() == 1, "out: expected a contiguous tensor");
}

// out[k] = the k-th of out.numel() consecutive stock draws; the generator advances by all of
// them (4 per draw), as that many torch.randint(0, 2**32, (1,)) calls would. Everything is
// checked before the generator moves.
void draw_seeds(Tensor out) {
  check_draw_seeds(out);
  if (!out.is_cuda())
    raise_as(kDeviceProblem, "out: expected a CUDA tensor, got one on " + out.device().str());
  const c10::cuda::CUDAGuard guard(out.device());
  const auto stream = c10::cuda::getCurrentCUDAStream(out.get_device());
  draw_into(out, take_position(out.get_device(), stream, static_cast<uint64_t>(out.numel())),
            stream);
}

// counter_seeds' tensors as torch holds them (no device needed: the kernel and the fake
// implementation run it): the counter one int64 element (TensorRT-LLM's rand_seed: checked as
// FlashInfer checks a seed tensor), out n contiguous int64 elements. n's range, the pointers'
// alignment and the overlap of counter and out are the C launcher's rules.
void check_counter_seeds(const Tensor &counter, int64_t n, const Tensor &out) {
  if (!symbolic(counter) && counter.numel() != 1)
    raise_as(kSeedTensorProblem, "counter: expected a single-element tensor, got numel=" +
                                     std::to_string(counter.numel()));
  if (counter.scalar_type() != at::kLong)
    raise_as(kSeedTensorProblem, std::string("counter: expected dtype int64, got ") +
                                     c10::toString(counter.scalar_type()));
  if (out.scalar_type() != at::kLong)
    raise_as(kSeedTensorProblem,
             std::string("out: expected dtype int64, got ") + c10::toString(out.scalar_type()));
  if (symbolic(out)) return;
  if (out.numel() != n || !out.is_contiguous())
    raise_as(kSeedTensorProblem, "out: expected n = " + std::to_string(n) +
                                     " contiguous elements, got numel=" +
                                     std::to_string(out.numel()) +
                                     (out.is_contiguous() ? "" : " (not contiguous)"));
}

// TensorRT-LLM's counter: out[k] = counter + k + 1 for k < n, then counter += n (one launch of
// mamba_ssu_counter_seeds); both tensors on one CUDA device.
void counter_seeds(Tensor counter, int64_t n, Tensor out) {
  check_counter_seeds(counter, n, out);
  if (!counter.is_cuda())
    raise_as(kDeviceProblem,
             "counter: expected a CUDA tensor, got one on " + counter.device().str());
  if (out.device() != counter.device())
    raise_as(kDeviceProblem, "out: expected a tensor on " + counter.device().str() +
                                 " (the device of counter), got one on " + out.device().str());
  const c10::cuda::CUDAGuard guard(counter.device());
  const auto stream = c10::cuda::getCurrentCUDAStream(counter.get_device());
  // An empty out has no data pointer; none of its 0 elements is touched, so a non-null aligned
  // stand-in lets the launcher's own rule on n speak.
  auto *out_ptr = out.numel() == 0 ? reinterpret_cast<int64_t *>(kPlaceholderStride)
                                   : static_cast<int64_t *>(out.data_ptr());
  check_status(mamba_ssu_counter_seeds(as_stream(stream),
                                       static_cast<int64_t *>(counter.data_ptr()), out_ptr,
                                       sat_u32(n)),
               "mamba_ssu.counter_seeds");
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
  // The seeds of `device` for forwards of n stochastic-rounding layers. The fused path's C
  // prefetcher (mamba_ssu_prefetcher) is created here, unless the device's current stream is
  // capturing a CUDA graph (its creation allocates a stream, events and device buffers, which a
  // capture does not allow): then at the fused path's first use (c_prefetcher). next_seed
  // never needs it.
  SeedPrefetcher(int64_t n, int64_t device)
      : n_(n), device_(static_cast<c10::DeviceIndex>(device)) {
    TORCH_CHECK_VALUE(device >= 0 && device < c10::cuda::device_count(),
                      "device: expected a CUDA device index below ", c10::cuda::device_count(),
                      ", got ", device);
    const c10::cuda::CUDAGuard guard(device_);
    const auto stream = c10::cuda::getCurrentCUDAStream(device_);
    if (capture_id(stream) == 0) c_prefetcher(stream);
  }

  SeedPrefetcher(const SeedPrefetcher &) = delete;
  SeedPrefetcher &operator=(const SeedPrefetcher &) = delete;

  ~SeedPrefetcher() {
    mamba_ssu_prefetcher_destroy(p_);  // a destructor reports nothing
    if (keepalive_.empty()) return;
    std::lock_guard<std::mutex> lock(retired_mutex);
    for (auto &t : keepalive_) retired_buffers().push_back(std::move(t));
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

  // Opens a fused forward of the C prefetcher on the current stream, its chain links in a
  // buffer allocated here per forward (from the graph's pool under capture, and then kept alive
  // with the prefetcher: captured kernels point into it).
  void begin_fused_forward() {
    const c10::cuda::CUDAGuard guard(device_);
    const auto stream = c10::cuda::getCurrentCUDAStream(device_);
    mamba_ssu_prefetcher *p = c_prefetcher(stream);
    Tensor links = at::empty({n_}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA, device_));
    check_status(mamba_ssu_prefetcher_begin_fused_forward_links(
                     p, as_stream(stream), nullptr, static_cast<int64_t *>(links.data_ptr())),
                 "mamba_ssu.SeedPrefetcher.fused_forward");
    links_ = links;
    in_forward_ = true;
    if (capture_id(stream) != 0) keepalive_.push_back(links);
  }

  // Closes the fused forward; returns the number of fused calls it served.
  int64_t end_fused_forward() {
    TORCH_CHECK(p_ != nullptr, "mamba_ssu.SeedPrefetcher.fused_forward: no fused forward is open");
    const c10::cuda::CUDAGuard guard(device_);
    mamba_ssu_forward_summary summary{};
    const int s = mamba_ssu_prefetcher_end_forward(p_, &summary);
    in_forward_ = false;
    links_ = Tensor();
    check_status(s, "mamba_ssu.SeedPrefetcher.fused_forward");
    return summary.requested;
  }

  bool in_fused_forward() const { return in_forward_; }

  // The fused SSU (rand_seed=FusedSeed): the kernel derives this call's stock seed itself, or,
  // chained inside a fused forward, reads the link the previous call stored. Everything the
  // call's arguments decide is checked before the generator moves (a rejected call draws
  // nothing); then torch's generator hands out this call's position (one draw, exactly as
  // torch.randint would take it), the C prefetcher turns it into the seed, and the launch tells
  // the prefetcher that the call writing the next link was enqueued.
  static void ssu_fused(SeedPrefetcher &self, const SsuCall &c) {
    TORCH_CHECK(!c.rand_seed, "ssu_fused: the seed is the prefetcher's (rand_seed must be None)");
    mamba_ssu_args a;
    const char *zero_dim = nullptr;
    to_args(c, Pointers::kOwnOnCuda, &a, &zero_dim);
    // The seed as it will be (derived at a position), for the check.
    a.seed.mode = MAMBA_SSU_SEED_MODE_DERIVED;
    if (zero_dim != nullptr) reject_zero_dim(a, zero_dim);
    if (const auto r = device_problem(c, c10::Device(c10::kCUDA, self.device_)))
      reject_devices(a, *r);
    check_status(mamba_ssu_check(&a, nullptr), kSsu);
    const c10::cuda::CUDAGuard guard(self.device_);
    const auto stream = c10::cuda::getCurrentCUDAStream(self.device_);
    mamba_ssu_prefetcher *p = self.c_prefetcher(stream);
    const mamba_ssu_position pos = take_position(self.device_, stream, 1).c_position();
    int s = mamba_ssu_prefetcher_derive_seed_at(p, as_stream(stream), &pos, &a.seed);
    // A chain whose previous link was never confirmed (that call's launch failed, and raised)
    // is refused once and restarts: this request then derives its own seed.
    if (s == MAMBA_SSU_ERROR_SCOPE && self.in_forward_)
      s = mamba_ssu_prefetcher_derive_seed_at(p, as_stream(stream), &pos, &a.seed);
    check_status(s, kSsu);
    ++self.stats_.requested;
    if (a.seed.mode == MAMBA_SSU_SEED_MODE_POINTER) ++self.stats_.served;
    a.num_sms = num_sms(self.device_);
    check_status(mamba_ssu_launch(as_stream(stream), &a), kSsu);
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
  // The C prefetcher, created by the constructor or (for a prefetcher made under CUDA-graph
  // capture) at the fused path's first use. Its creation allocates a stream, events and device
  // buffers, which a capture does not allow: a creation while `stream` captures is refused
  // before anything could invalidate the capture.
  mamba_ssu_prefetcher *c_prefetcher(const c10::cuda::CUDAStream &stream) {
    if (p_ != nullptr) return p_;
    TORCH_CHECK(capture_id(stream) == 0,
                "mamba_ssu.SeedPrefetcher: the fused path's first use on cuda:",
                static_cast<int>(device_),
                " must be outside CUDA-graph capture when the prefetcher was made under capture "
                "(it creates the C prefetcher: a stream, events and device buffers); make the "
                "prefetcher outside capture, or run one eager fused step first");
    check_status(mamba_ssu_prefetcher_create(&p_, sat_u32(n_), MAMBA_SSU_PREFETCH_AT_BEGIN),
                 "mamba_ssu.SeedPrefetcher");
    return p_;
  }

  int64_t n_;
  c10::DeviceIndex device_;
  mamba_ssu_prefetcher *p_ = nullptr;

  // next_seed's held batch.
  Tensor batch_;
  Position batch_pos_;
  std::optional<c10::cuda::CUDAStream> batch_stream_;

  bool in_forward_ = false;
  Tensor links_;  // the open fused forward's chain links
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
      "Tensor? state_batch_indices, int pad_slot_id, Tensor? state_scale, Tensor(b!) out, "
      "bool disable_state_update, Tensor(c!)? intermediate_states_buffer, "
      "Tensor? intermediate_state_indices, Tensor? intermediate_state_scales, "
      "Tensor? rand_seed, int philox_rounds, int cache_steps, int algorithm, "
      "Tensor? dst_state_batch_indices, Tensor? cu_seqlens, Tensor? num_accepted_tokens, "
      "int sr_rule=0) -> ()");
  m.def("draw_seeds(Tensor(a!) out) -> ()");
  m.def("counter_seeds(Tensor(a!) counter, int n, Tensor(b!) out) -> ()");
}

TORCH_LIBRARY_IMPL(mamba_ssu, CUDA, m) {
  m.impl("selective_state_update", ssu_entry<&ssu>());
  m.impl("draw_seeds", &draw_seeds);
  m.impl("counter_seeds", &counter_seeds);
}

// ---------------------------------------------------------------------------------------------
// The Python module: direct calls (no dispatcher on the hot path) for eager and graph capture.

PYBIND11_MODULE(_C, m) {
  m.doc() = "mamba-ssu's torch binding (use the mamba_ssu package, not this module)";
  m.def("selective_state_update", ssu_entry<&ssu>(),
        "the SSU (op mamba_ssu::selective_state_update's kernel): seed tensor or none");
  m.def("check", ssu_entry<&check>(),
        "the C contract's check of an SSU call (placeholder pointers; no device touched)");
  m.def("status_classes", &status_classes,
        "the one table from a C status (mamba_ssu_status) to the exception class it raises");
  m.def(
      "raise_status", [](int status, const std::string &message) { raise_as(status, message); },
      "raises message as the class the table gives status (what every C failure goes through)");
  m.def("draw_seeds", &draw_seeds, "n consecutive stock torch.randint draws into out");
  m.def("counter_seeds", &counter_seeds, "out[k] = counter + k + 1, counter += n (one launch)");
  m.def("check_draw_seeds", &check_draw_seeds, "draw_seeds' checks of out (no device touched)");
  m.def("check_counter_seeds", &check_counter_seeds,
        "counter_seeds' checks of counter and out (no device touched)");
  py::class_<SeedPrefetcher>(m, "SeedPrefetcher")
      .def(py::init<int64_t, int64_t>(), py::arg("num_layers"), py::arg("device"))
      .def("next_seed", &SeedPrefetcher::next_seed)
      .def("begin_fused_forward", &SeedPrefetcher::begin_fused_forward)
      .def("end_fused_forward", &SeedPrefetcher::end_fused_forward)
      .def("in_fused_forward", &SeedPrefetcher::in_fused_forward)
      .def("ssu_fused", ssu_entry<&SeedPrefetcher::ssu_fused, SeedPrefetcher &>())
      .def("stats", &SeedPrefetcher::stats)
      .def_property_readonly("num_layers", &SeedPrefetcher::num_layers)
      .def_property_readonly("device", &SeedPrefetcher::device);
  m.attr("MAX_SEEDS_PER_DRAW") = MAMBA_SSU_MAX_SEEDS_PER_DRAW;
  m.attr("MTP_MAX_TOKENS") = MAMBA_SSU_MTP_MAX_TOKENS;
}
