//! Selective state update over T tokens per sequence (speculative-decoding verify): the safe
//! layer over the C launcher `mamba_ssu_selective_state_update_mtp` (`csrc/ssu_mtp.cu`),
//! FlashInfer 0.7.2's multi-token path. The f64 CPU reference of the same semantics is
//! [`crate::reference::selective_state_update_mtp_f64`].
//!
//! Layer: safe API, as the single-token [`crate::ssu`]: tensors are type-erased views of
//! borrowed cudarc buffers with a dtype, a shape and strides in elements. [`validate_mtp`]
//! checks the whole contract as a pure function of the layouts (ending with the C ABI's own
//! check, `mamba_ssu_selective_state_update_mtp_check`); [`selective_state_update_mtp`]
//! validates, checks devices, fills `mamba_ssu_mtp_params` and enqueues the call,
//! **asynchronously on the stream it is given**; [`mtp_launch_plan`] returns the launch
//! configuration of a call without touching a device.
//!
//! # Sequences
//! Fixed length (no `cu_seqlens`): `x` is (batch, T, nheads, dim) and sequence `b` is the T
//! tokens `x[b, t]`, T in 1..=[`MTP_MAX_TOKENS`]. Varlen: `x` is (total_tokens, nheads, dim),
//! `cu_seqlens` (batch + 1,) holds the offsets, sequence `b` is the rows
//! `cu_seqlens[b] .. cu_seqlens[b + 1]`, and `cache_steps` (1..=[`MTP_MAX_TOKENS`]) is the most
//! tokens a sequence may have (rows past it are not computed). `total_tokens` may be 0.
//!
//! # Shape and stride contract (FlashInfer's)
//! `..` stands for the leading token dimensions: (batch, T) fixed length, (total_tokens,)
//! varlen.
//!
//! | argument | shape | dtype | strides (elements) |
//! |---|---|---|---|
//! | `state` | (slots, nheads, dim, dstate) | F16, BF16, F32 | (s0, dim·dstate, dstate, 1), s0 ≥ nheads·dim·dstate, s0 · elem a multiple of 16 bytes |
//! | `x`, `z`, `out` | (.., nheads, dim) | input dtype: F16, BF16, F32 | (any.., dim, 1); `out` rows may not overlap (below) |
//! | `dt` | (.., nheads, dim) | weight dtype: F16, BF16, F32 | (any.., 1, 0) |
//! | `A` | (nheads, dim, dstate) | F32 | (1, 0, 0) |
//! | `D`, `dt_bias` | (nheads, dim) | weight dtype | (1, 0) |
//! | `B`, `C` | (.., ngroups, dstate) | input dtype | (s.., dstate, 1), every leading s · elem a multiple of 16 bytes |
//! | `state_batch_indices` | (batch,) or (batch, W) | index dtype: I32 or I64 | any |
//! | `dst_state_batch_indices` | (batch, W), W ≥ T (varlen: ≥ `cache_steps`) | index dtype | any |
//! | `num_accepted_tokens` | (batch,) | index dtype | any |
//! | `cu_seqlens` | (batch + 1,) | index dtype | any |
//! | `intermediate_states_buffer` | (entries, cache_steps, nheads, dim, dstate) | the state's | contiguous |
//! | `intermediate_state_indices` | (batch,) | index dtype | any |
//! | `rand_seed` ([`SeedSource::Pointer`]) | one element | I64 | — |
//!
//! dstate ∈ {64, 128, 256} (else [`Error::Unsupported`](crate::Error::Unsupported)); ngroups
//! divides nheads; batch ≥ 1; `batch · nheads · max(4, ⌈dim / 64⌉)` (+ 1 with a fused chain's
//! link) ≤ `i32::MAX` (the grid; else unsupported);
//! every tensor's largest reachable element lies inside its buffer and its extent below 2^60
//! bytes. Every index tensor has the same dtype. Alignment (checked at launch): `state`, the
//! intermediate buffer, `B`, `C` 16 bytes; `x`, `z`, `out`, `dt`, `D`, `dt_bias`, `A` and the
//! index tensors their element size.
//!
//! `out` rows (nheads·dim elements each) may not overlap. Fixed length: when T > 1,
//! `out.stride(1) ≥ nheads·dim`; when batch > 1, `out.stride(0) ≥ T·out.stride(1)` (T > 1) or
//! `≥ nheads·dim` (T = 1). Varlen: when total_tokens > 1, `out.stride(0) ≥ nheads·dim`.
//!
//! `cache_steps` ([`MtpArgs::cache_steps`]): with a buffer it must equal the buffer's size(1)
//! (it defaults to it) and be ≥ the tokens per sequence; varlen it is T of the call (the
//! buffer's size(1) when not given; required without a buffer); fixed length without a buffer
//! it is not used.
//!
//! # Slots and write modes
//! Read slot of sequence `b`: `state_batch_indices[b]` (1-D), `state_batch_indices[b, k]`
//! (2-D) with `k = max(num_accepted_tokens[b] - 1, 0)` (or 0 without counts), `b` without
//! indices (then batch ≤ slots). A read slot equal to `pad_slot_id` or out of range makes the
//! sequence a pad: zero initial state, `out` computed, nothing written. Write modes, at most
//! one: the intermediate buffer (token t of sequence b to entry
//! `intermediate_state_indices[b]` or the read slot, step t; the state is not written); a
//! `dst_state_batch_indices` (token t to slot `dst[b, t]`); neither (the last token's state to
//! the read slot, unless [`MtpArgs::disable_state_update`]). Index values live in device
//! memory and are not checked on the host.
//!
//! Stochastic rounding: `philox_rounds` ∈ 0..=10; rounds > 0 need an F16 state and a seed
//! ([`SeedSource`], as single token); [`MtpArgs::sr_rule`] picks FlashInfer 0.7.2's (default) or
//! 0.7.4's conversion.
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
