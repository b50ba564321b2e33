//! Selective state update over T tokens per sequence (speculative-decoding verify),
//! FlashInfer 0.7.2's multi-token path. The f64 CPU reference of the same semantics is
//! [`crate::reference::selective_state_update_mtp_f64`].
//!
//! Layer: safe API over the same one contract as the single-token [`crate::ssu`] (its section
//! "One contract, enforced by the C check" holds here word for word): [`MtpArgs`] fills one
//! `mamba_ssu_args` asking for the multi-token form, and the C check (`mamba_ssu_check` of
//! `mamba_ssu.h`) decides every rule; the Rust layer adds only the buffers, devices, `int64_t`
//! sizes and borrows. [`validate_mtp`] checks a call as a pure function of its layouts;
//! [`selective_state_update_mtp`] checks it, then enqueues it, **asynchronously on the stream
//! it is given**; [`mtp_launch_plan`] returns the launch configuration of a call
//! (`mamba_ssu_plan`) without touching a device.
//!
//! # Sequences
//! Fixed length (no `cu_seqlens`): `x` is (batch, T, nheads, dim) and sequence `b` is the T
//! tokens `x[b, t]`, T in 1..=[`MTP_MAX_TOKENS`] (a (batch, nheads, dim) `x` with `cache_steps`
//! is one token per sequence, FlashInfer's normalisation). Varlen: `x` is (total_tokens, nheads,
//! dim), `cu_seqlens` (batch + 1,) holds the offsets, sequence `b` is the rows `cu_seqlens[b] ..
//! cu_seqlens[b + 1]`, and `cache_steps` (1..=[`MTP_MAX_TOKENS`]) is the most tokens a sequence
//! may have (rows past it are not computed). `total_tokens` may be 0.
//!
//! # Shapes (FlashInfer's), multi token
//! `state`, `A`, `D`, `dt_bias` and `rand_seed` as single token ([`crate::ssu`]); `..` stands
//! for the leading token dimensions: (batch, T) fixed length, (total_tokens,) varlen.
//!
//! | argument | shape | dtype | strides (elements) |
//! |---|---|---|---|
//! | `x`, `z`, `out` | (.., nheads, dim) | input dtype: F16, BF16, F32 | (any.., dim, 1) |
//! | `dt` | (.., nheads, dim) | weight dtype: F16, BF16, F32 | (any.., 1, 0) |
//! | `B`, `C` | (.., ngroups, dstate) | input dtype | (s.., dstate, 1) |
//! | `state_batch_indices` | (≥ batch,) or (≥ batch, W), W ≥ T (varlen: ≥ `cache_steps`) | index dtype: I32 or I64 | any |
//! | `dst_state_batch_indices` | (≥ batch,) or (≥ batch, W), W ≥ T (varlen: ≥ `cache_steps`) | the read index's | any |
//! | `num_accepted_tokens` | (≥ batch,), needs a `state_batch_indices` | I32 or I64, its own | any |
//! | `cu_seqlens` | (batch + 1,) | I32 or I64, its own | any |
//! | `intermediate_states_buffer` | (entries, cache_steps, nheads, dim, dstate) | the state's | contiguous |
//! | `intermediate_state_indices` | (batch,) | the read index's | any |
//!
//! FlashInfer's index rules: the slot indices' dtype is `state_batch_indices`' (else the dst
//! index's, else `intermediate_state_indices`'); `dst_state_batch_indices` has the read index's
//! dtype, and so has `intermediate_state_indices` when both are given; `num_accepted_tokens` and
//! `cu_seqlens` each have their own (a dtype other than the slot indices' runs the run-time
//! kernel). Index tensors may be longer than the batch, and a 2-D one wider than T (engines'
//! padded tensors: only the first rows and columns are read). A 1-D `dst_state_batch_indices`
//! sends every token of sequence b to slot `dst[b]`; `num_accepted_tokens` with a 1-D read index
//! reads `state_batch_indices[b]`; `intermediate_state_indices` without a buffer is not read.
//! Besides the single-token limits, the C check's: the
//! leading strides of `B` and `C` 16-byte multiples; `x`, `z`, `out`, `dt`, `D`, `dt_bias`,
//! `A` and the index tensors aligned to their element size, the intermediate buffer to 16
//! bytes; the grid `batch · nheads · max(4, ⌈dim / 64⌉)` (+ 1 with a fused chain's link) at
//! most `i32::MAX`; `out` rows (nheads·dim elements each) that do not overlap (fixed length:
//! `out.stride(1) ≥ nheads·dim` when T > 1, `out.stride(0) ≥ T·out.stride(1)` or `≥ nheads·dim`
//! when batch > 1; varlen: `out.stride(0) ≥ nheads·dim` when total_tokens > 1).
//!
//! `cache_steps` ([`MtpArgs::cache_steps`]): with a buffer it must equal the buffer's size(1)
//! (FlashInfer's kernels step through the buffer by it) and be ≥ the tokens per sequence; varlen
//! it is T of the call, ≥ 1; fixed length without a buffer it is not used. Not given (`None`),
//! the Rust API passes the buffer's size(1), else FlashInfer's 0.
//!
//! # Slots and write modes
//! Read slot of sequence `b`: `state_batch_indices[b]` (1-D), `state_batch_indices[b, k]`
//! (2-D) with `k = max(num_accepted_tokens[b] - 1, 0)` (or 0 without counts), `b` without
//! indices (then batch ≤ slots). A read slot equal to `pad_slot_id` or out of range makes the
//! sequence a pad: zero initial state, `out` computed, nothing written. Write modes, at most
//! one (two are an option conflict, C's `MAMBA_SSU_ERROR_INVALID_VALUE`): the intermediate
//! buffer (token t of sequence b to entry `intermediate_state_indices[b]` or the read slot, step
//! t; the state is not written); a `dst_state_batch_indices` (token t to slot `dst[b, t]`, or
//! `dst[b]` for a 1-D index);
//! neither (the last token's state to the read slot, unless
//! [`MtpArgs::disable_state_update`]). Index values live in device memory and are not checked
//! on the host.
//!
//! Stochastic rounding: as single token ([`SeedSource`], any count of rounds >= 1; 0: none);
//! [`MtpArgs::sr_rule`] picks FlashInfer 0.7.2's (default) or 0.7.4's conversion.
//!
//! # Example
//! ```no_run
//! use mamba_ssu::device;
//! use mamba_ssu::ssu::mtp::{selective_state_update_mtp, MtpArgs};
//! use mamba_ssu::ssu::{SeedSource, Tensor, TensorMut};
//! use half::{bf16, f16};
//!
//! # fn main() -> Result<(), mamba_ssu::Error> {
//! let (slots, batch, t, nheads, dim, dstate, ngroups) = (8, 4, 4, 32, 64, 128, 8);
//! let ctx = device::open(0)?;
//! let stream = ctx.new_stream()?;
//! let mut state = stream.alloc_zeros::<f16>(slots * nheads * dim * dstate)?;
//! let x = stream.alloc_zeros::<bf16>(batch * t * nheads * dim)?;
//! let dt = stream.alloc_zeros::<bf16>(batch * t * nheads)?;
//! let a = stream.alloc_zeros::<f32>(nheads)?;
//! let bc = stream.alloc_zeros::<bf16>(batch * t * ngroups * dstate)?;
//! let mut out = stream.alloc_zeros::<bf16>(batch * t * nheads * dim)?;
//! let slots_read = stream.alloc_zeros::<i32>(batch)?;
//! let dst = stream.alloc_zeros::<i32>(batch * t)?;
//! let seed = stream.alloc_zeros::<i64>(1)?;
//! let mut args = MtpArgs::new(
//!     TensorMut::contiguous(&mut state, &[slots, nheads, dim, dstate])?,
//!     Tensor::contiguous(&x, &[batch, t, nheads, dim])?,
//!     Tensor::new(&dt, &[batch, t, nheads, dim], &[t * nheads, nheads, 1, 0])?,
//!     Tensor::new(&a, &[nheads, dim, dstate], &[1, 0, 0])?,
//!     Tensor::contiguous(&bc, &[batch, t, ngroups, dstate])?,
//!     Tensor::contiguous(&bc, &[batch, t, ngroups, dstate])?,
//!     TensorMut::contiguous(&mut out, &[batch, t, nheads, dim])?,
//! )
//! .state_batch_indices(Tensor::contiguous(&slots_read, &[batch])?)
//! .dst_state_batch_indices(Tensor::contiguous(&dst, &[batch, t])?)
//! .dt_softplus(true)
//! .stochastic_rounding(SeedSource::Pointer(Tensor::contiguous(&seed, &[1])?), 10);
//! selective_state_update_mtp(&stream, &mut args)?; // asynchronous on `stream`
//! # Ok(()) }
//! ```

// Files: `args.rs` holds the call's arguments and their host-side description (MtpArgs,
// MtpSpec, MtpProblem, MtpLaunchPlan); `validation.rs` holds `validate_mtp`; `launch.rs`
// `selective_state_update_mtp` and `mtp_launch_plan`, both over the bridge of `ssu/contract.rs`;
// `fixtures.rs` the valid calls the unit tests start from. Each file carries the unit tests of
// its own code.

mod args;
#[cfg(test)]
mod fixtures;
mod launch;
mod validation;

pub use args::{MtpArgs, MtpLaunchPlan, MtpProblem, MtpSpec};
pub use launch::{mtp_launch_plan, selective_state_update_mtp};
pub use validation::{validate_mtp, MTP_MAX_TOKENS};

#[doc(inline)]
pub use crate::ssu::{SeedSource, SeedSpec, SrRule};
