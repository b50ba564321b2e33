//! Selective state update, FlashInfer 0.7.2 compatible: the single-token decode step here, the
//! multi-token (speculative-decoding verify) step in [`mtp`]. The safe layer over the C ABI's
//! one contract, `mamba_ssu_check` / `mamba_ssu_launch` / `mamba_ssu_plan` of `mamba_ssu.h`.
//!
//! Layer: safe API. Tensors are type-erased views of borrowed cudarc buffers ([`Tensor`],
//! [`TensorMut`], defined in [`crate::tensor`] and re-exported here) with a dtype, a shape and
//! strides in elements, like torch tensors whose storage offset is the start of the buffer:
//! element `[i0, i1, ..]` lives at `Σ i_k · stride_k` (a stride may be 0 for a broadcast
//! dimension). [`validate`] checks a call as a pure function of its layouts;
//! [`selective_state_update`] checks it, then enqueues it. The call is **asynchronous on the
//! stream it is given**: it returns once the kernel is enqueued, and cudarc's event tracking
//! orders it after earlier writes of the buffers.
//!
//! # One contract, enforced by the C check
//! Both forms fill one `mamba_ssu_args` from the call's views — each tensor's device pointer,
//! dtype, shape and strides under its FlashInfer name (an absent tensor rank 0), the options,
//! the seed as one `mamba_ssu_seed`, and the form asked for: single token here, multi token in
//! [`mtp`] — and the C check decides. It is the one place where the contract's rules are
//! written, for this crate, its torch extension and C callers alike (the rule list: the header's
//! section "The SSU call"). A rejection is an [`Error::InvalidArgument`] (C's
//! `MAMBA_SSU_ERROR_INVALID_ARGUMENT`: a shape, dtype, stride or size outside the contract;
//! `MAMBA_SSU_ERROR_INVALID_VALUE`: an option outside its set, or two that conflict) or an
//! [`Error::Unsupported`] (a valid combination no kernel serves), naming the argument as the C
//! check does (`x`, `B`, `philox_rounds`, `seed.position`, ...), with its detail as the message.
//!
//! The Rust layer adds only what C cannot see: every tensor's largest reachable element
//! `Σ (shape_k − 1) · stride_k` lies inside its buffer; sizes and strides fit `int64_t`; every
//! buffer lives on the stream's device ([`Error::WrongDevice`]); a [`SeedSource::Pointer`]
//! tensor is one I64 element; and the borrows keep every buffer alive until the launch is
//! enqueued. The pure check runs first, before any device work, with placeholder pointers; the
//! launch checks again with the buffers' pointers (their alignment is the C check's too).
//!
//! # Shapes (FlashInfer's), single token
//! | argument | shape | dtype | strides (elements) |
//! |---|---|---|---|
//! | `state` | (slots, nheads, dim, dstate) | F16, BF16, F32 | (s0, dim·dstate, dstate, 1) |
//! | `x`, `out`, `z` | (batch, nheads, dim) | input dtype: F16, BF16, F32 | (sb, dim, 1) |
//! | `dt` | (batch, nheads, dim) | weight dtype: F16, BF16, F32 | (any, 1, 0) |
//! | `A` | (nheads, dim, dstate) | F32 | (1, 0, 0) |
//! | `D`, `dt_bias` | (nheads, dim) | weight dtype | (1, 0) |
//! | `B`, `C` | (batch, ngroups, dstate) | input dtype | (sb, dstate, 1) |
//! | `state_batch_indices`, `dst_state_batch_indices` | (≥ batch,) or (≥ batch, ≥ 1) | I32 or I64 (dst: the read index's) | any; column 0 of the first batch rows is read |
//! | `rand_seed` ([`SeedSource::Pointer`]) | one element | I64 | — |
//!
//! FlashInfer's one-head ranks are taken too (a 3-D `state`, a 2-D `A`, 1-D `D` and `dt_bias`,
//! 2-D token tensors). Index tensors may be longer than the batch (FlashInfer's `size(0) >=
//! batch`: engines pass padded tensors; only the first rows are read). FlashInfer's
//! multi-token arguments (`intermediate_*`, `num_accepted_tokens`, a `cache_steps` below 1) are
//! ignored on this path, as FlashInfer ignores them. Besides the shapes, the C check's limits:
//! dstate in [`SUPPORTED_DSTATE`] ([`SUPPORTED_DSTATE_F32`] with an fp32 state); ngroups
//! divides nheads; batch ≥ 1, slots ≥ batch without read indices; the slot stride at least a
//! slot; the batch strides of `state`, `x`, `z`, `out`, `B`, `C` and those six pointers
//! 16-byte multiples (whole cudarc allocations are aligned);
//! `out` rows that do not overlap; extents and the grid within the kernels' bounds. The seed:
//! any `philox_rounds` up to `i32::MAX` (0: none; FlashInfer sets no upper bound, and counts
//! other than 5 and 10 run the run-time kernel); rounds > 0 (stochastic rounding) need an F16
//! state and a seed: one int64 in device memory ([`SeedSource::Pointer`], FlashInfer's
//! `rand_seed`), or the kernel derives the stock torch draw itself, from a device-resident
//! generator state ([`SeedSource::FromGenerator`], CUDA-graph safe) or from host values
//! ([`SeedSource::FromValues`]), at an offset that is a multiple of 4. With 0 rounds the state is
//! rounded to nearest and a given seed is not read (a fused seed still passes its chain's link
//! on).
//!
//! Slots: batch entry `b` reads slot `state_batch_indices[b, 0]` (or `b` without indices) and
//! writes `dst_state_batch_indices[b, 0]` (or the read slot) unless
//! [`SsuArgs::disable_state_update`]. A read slot equal to `pad_slot_id` (or outside `0..slots`)
//! is a pad: the state is read as zeros, `out` is still written, no state is written; a write
//! slot equal to `pad_slot_id` (or out of range) is not written either. Index values live in
//! device memory and are not checked on the host.
//!
//! Speed: the shapes engines run hot (F16 state, BF16 inputs and weights, F32 `A`, head dim a
//! multiple of 16 up to 256, dstate 64, 128 or 256, 0, 5 or 10 rounds; a BF16, F32 or I16
//! (block-scaled) state likewise without SR; the multi-token form likewise at any head dim, with
//! an F16, BF16 or I16 state, `z` read at run time) run compiled-in kernels, the single-token ones
//! each built with and without `z`:
//! leaving `z` as `None` (gating done later, as in engines' Mamba-2 mixers) runs a loop with
//! no `z` work at all. The library also has them for F16 inputs and weights over an F16 state,
//! and without SR over a BF16 or (single token) F32 state, unless it was built with
//! `MAMBA_SSU_F16_INPUT_KERNELS=0`. Every other combination runs a
//! kernel that takes sizes, dtypes and rounds at run time (same results, slower). Figures:
//! `BENCHMARKS.md`.
//!
//! [`Error::InvalidArgument`]: crate::Error::InvalidArgument
//! [`Error::Unsupported`]: crate::Error::Unsupported
//! [`Error::WrongDevice`]: crate::Error::WrongDevice
//!
//! # The SR conversion: FlashInfer 0.7.2's or 0.7.4's
//! [`SsuArgs::sr_rule`] picks the fp32 → fp16 conversion of stochastic rounding per call:
//! [`SrRule::V072`] (the default, what engines pin) or [`SrRule::V074`] (FlashInfer 0.7.4's:
//! Inf stays Inf, NaN stays NaN, finite values past 65504 saturate to Inf, results below 2^-14
//! round stochastically onto fp16 subnormals). The random bits, their mapping and the summation
//! order are the same under both, and so is every result of magnitude in [2^-14, 65504). The
//! compiled-in hot kernels implement 0.7.2's conversion only: a call with stochastic rounding
//! under `V074` runs the run-time (generic) kernel, also for the hot shapes, and is slower than
//! the same call under `V072`. Without stochastic rounding the rule changes nothing. The CPU
//! prediction under either rule: [`crate::reference::predict_sr_state_f16_with_rule`].
//!
//! # Example
//! ```no_run
//! use mamba_ssu::device;
//! use mamba_ssu::ssu::{selective_state_update, SeedSource, SsuArgs, Tensor, TensorMut};
//! use half::{bf16, f16};
//!
//! # fn main() -> Result<(), mamba_ssu::Error> {
//! let (slots, batch, nheads, dim, dstate, ngroups) = (8, 4, 32, 64, 128, 8);
//! let ctx = device::open(0)?;
//! let stream = ctx.new_stream()?;
//! let mut state = stream.alloc_zeros::<f16>(slots * nheads * dim * dstate)?;
//! let x = stream.alloc_zeros::<bf16>(batch * nheads * dim)?;
//! let dt = stream.alloc_zeros::<bf16>(batch * nheads)?;
//! let a = stream.alloc_zeros::<f32>(nheads)?;
//! let bc = stream.alloc_zeros::<bf16>(batch * ngroups * dstate)?;
//! let mut out = stream.alloc_zeros::<bf16>(batch * nheads * dim)?;
//! let seed = stream.alloc_zeros::<i64>(1)?;
//! let mut args = SsuArgs::new(
//!     TensorMut::contiguous(&mut state, &[slots, nheads, dim, dstate])?,
//!     Tensor::contiguous(&x, &[batch, nheads, dim])?,
//!     Tensor::new(&dt, &[batch, nheads, dim], &[nheads, 1, 0])?,
//!     Tensor::new(&a, &[nheads, dim, dstate], &[1, 0, 0])?,
//!     Tensor::contiguous(&bc, &[batch, ngroups, dstate])?,
//!     Tensor::contiguous(&bc, &[batch, ngroups, dstate])?,
//!     TensorMut::contiguous(&mut out, &[batch, nheads, dim])?,
//! )
//! .dt_softplus(true)
//! .stochastic_rounding(SeedSource::Pointer(Tensor::contiguous(&seed, &[1])?), 10);
//! selective_state_update(&stream, &mut args)?; // asynchronous on `stream`
//! # Ok(()) }
//! ```

// Files: `args.rs` holds the call's arguments and their host-side description (SsuArgs,
// Algorithm, SsuSpec, SsuProblem); `seed.rs` the seed (SeedSource, SeedSpec) and its one
// conversion into the C ABI's `mamba_ssu_seed`; `contract.rs` the bridge of both forms to the C
// contract (a call's tensors as `mamba_ssu_args`, the pure check and plan, the Rust-only buffer
// rule, the launch over borrowed buffers); `validation.rs` holds `validate`; `launch.rs`
// `selective_state_update`; `fixtures.rs` the valid call the unit tests start from. Each file
// carries the unit tests of its own code. `mtp/` is the multi-token form (its own args,
// validation and launch over the same bridge and seed).

mod args;
mod contract;
#[cfg(test)]
mod fixtures;
mod launch;
pub mod mtp;
#[cfg(test)]
mod props;
mod seed;
mod validation;

pub use args::{Algorithm, SsuArgs, SsuProblem, SsuSpec};
pub use launch::selective_state_update;
pub use mtp::{
    mtp_launch_plan, selective_state_update_mtp, validate_mtp, MtpArgs, MtpLaunchPlan, MtpProblem,
    MtpSpec,
};
pub use seed::{SeedSource, SeedSpec};
pub use validation::validate;

/// Formerly the most Philox rounds of stochastic rounding the kernels took (the header's
/// `MAMBA_SSU_MAX_PHILOX_ROUNDS`, 10). Any count >= 1 is taken now, as FlashInfer takes it;
/// 5 and 10 run the compiled-in kernels.
#[deprecated(note = "philox_rounds is not bounded above (any count >= 1, as FlashInfer)")]
pub const MAX_PHILOX_ROUNDS: u32 = crate::ffi::sys::MAMBA_SSU_MAX_PHILOX_ROUNDS;

/// The `dstate` values the kernels serve (the C check enforces them: another value FlashInfer's
/// sm_90 module takes is [`Error::Unsupported`](crate::Error::Unsupported), any other
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument)); the CPU references take the same.
/// 64, 128 and 256 run compiled-in kernels where the rest of the call allows; the other multiples
/// of 32 up to 512 (FlashInfer's module takes them for every state dtype) run the run-time
/// kernels: an int16 state at 96 to 224 too, but not under the VERTICAL mapping at 96, 160 and
/// 224, where FlashInfer's kernel indexes past a register array (its result there is undefined).
/// Above 256 FlashInfer's launcher refuses the VERTICAL mapping
/// ([`Error::InvalidArgument`](crate::Error::InvalidArgument), as AUTO resolved to it); an
/// int16 state is served there on the multi-token path, and on the single-token path at 512
/// only: at 288 to 480 FlashInfer's simple kernel indexes past a register array (its result is
/// undefined; [`Error::Unsupported`](crate::Error::Unsupported)).
/// An fp32 state takes
/// [`SUPPORTED_DSTATE_F32`].
pub const SUPPORTED_DSTATE: [usize; 15] = [
    64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, 480, 512,
];

/// The `dstate` values the kernels serve with an fp32 state: [`SUPPORTED_DSTATE`] and the other
/// multiples of 16 from 32 to 512 that FlashInfer's sm_90 module takes with an fp32 state
/// (run-time kernels), but 112: there FlashInfer's simple kernel reads and writes two columns
/// past each row, racing with the next row's warp, an undefined result the crate does not
/// reproduce ([`Error::Unsupported`](crate::Error::Unsupported)).
pub const SUPPORTED_DSTATE_F32: [usize; 30] = [
    32, 48, 64, 80, 96, 128, 144, 160, 176, 192, 208, 224, 240, 256, 272, 288, 304, 320, 336, 352,
    368, 384, 400, 416, 432, 448, 464, 480, 496, 512,
];

/// The stochastic-rounding conversion of a call (FlashInfer 0.7.2's, the default, or 0.7.4's);
/// the same type as the CPU reference's.
pub use crate::reference::SrRule;

#[doc(inline)]
pub use crate::tensor::{
    DType, Element, IntoDeviceView, IntoDeviceViewMut, Tensor, TensorLayout, TensorMut, MAX_RANK,
    VECTOR_ALIGN,
};
