//! # mamba-ssu
//!
//! CUDA kernels for the Mamba-2 decode step of hybrid language models (Nemotron-H class), for
//! inference engines in Rust (this crate's safe API), C and C++ (`csrc/include/mamba_ssu.h` and
//! a static library) and Python (the torch extension in `python/`).
//!
//! **The problem.** An engine that keeps its SSM state cache in fp16 with stochastic rounding
//! (SR) draws, in every Mamba-2 layer of every decode step, one seed with
//! `torch.randint(0, 2**32, (1,))` on the CUDA generator, then runs the selective-state-update
//! (SSU) kernel, which reads that seed from device memory: 40 layers, 40 extra kernels on the
//! critical path of each step. This crate draws a forward's seeds in **one** launch (or lets
//! the SSU derive them itself) with exactly torch's values and generator advance, eagerly and
//! across CUDA-graph replays, and provides an SSU that is FlashInfer 0.7.2-compatible bit for
//! bit and faster.
//!
//! ## Seeds: one launch for a forward
//!
//! ```no_run
//! use mamba_ssu::{device, philox, seeds, Generator};
//!
//! # fn main() -> Result<(), mamba_ssu::Error> {
//! let ctx = device::open(0)?;                 // an Error without a driver or GPU, never a panic
//! let stream = ctx.new_stream()?;
//! let mut gen = Generator::new(42, 0)?;       // torch's CUDA generator state (seed, offset)
//! let mut out = stream.alloc_zeros::<i64>(40)?;
//! let expected = gen.clone().draw_cpu(40);
//! seeds::draw_from(&stream, &mut gen, &mut out, 40)?; // one launch; gen.offset() == 160
//! let got = stream.clone_dtoh(&out)?;
//! assert!(got.iter().zip(&expected).all(|(g, e)| *g as u64 == *e));
//! assert_eq!(expected[0], philox::torch_seed(42, 0));
//! # Ok(()) }
//! ```
//!
//! ## The prefetcher and the fused path in a layer loop
//!
//! ```no_run
//! use half::{bf16, f16};
//! use mamba_ssu::prefetch::Prefetcher;
//! use mamba_ssu::ssu::{selective_state_update, SeedSource, SsuArgs, Tensor, TensorMut};
//! use mamba_ssu::{device, Generator};
//!
//! # fn main() -> Result<(), mamba_ssu::Error> {
//! let (slots, batch, nheads, dim, dstate, ngroups, layers) = (8, 4, 32, 64, 128, 8, 40);
//! let ctx = device::open(0)?;
//! let main = ctx.new_stream()?;
//! let mut state = main.alloc_zeros::<f16>(slots * nheads * dim * dstate)?;
//! let x = main.alloc_zeros::<bf16>(batch * nheads * dim)?;
//! let dt = main.alloc_zeros::<bf16>(batch * nheads)?;
//! let a = main.alloc_zeros::<f32>(nheads)?;
//! let bc = main.alloc_zeros::<bf16>(batch * ngroups * dstate)?;
//! let mut out = main.alloc_zeros::<bf16>(batch * nheads * dim)?;
//! let mut prefetcher = Prefetcher::new(&ctx, layers)?; // one per device; N = the SR layers
//! let mut gen = Generator::new(42, 0)?;
//!
//! // Prefetch: one batched draw on a side stream, a device seed per layer.
//! let mut fwd = prefetcher.forward(&main, &mut gen)?;
//! for _ in 0..layers {
//!     let seed = fwd.seed()?; // main waits on the draw once; FlashInfer's rand_seed pointer
//!     let mut args = SsuArgs::new(
//!         TensorMut::contiguous(&mut state, &[slots, nheads, dim, dstate])?,
//!         Tensor::contiguous(&x, &[batch, nheads, dim])?,
//!         Tensor::new(&dt, &[batch, nheads, dim], &[nheads, 1, 0])?,
//!         Tensor::new(&a, &[nheads, dim, dstate], &[1, 0, 0])?,
//!         Tensor::contiguous(&bc, &[batch, ngroups, dstate])?,
//!         Tensor::contiguous(&bc, &[batch, ngroups, dstate])?,
//!         TensorMut::contiguous(&mut out, &[batch, nheads, dim])?,
//!     )
//!     .stochastic_rounding(SeedSource::Prefetched(seed), 5);
//!     selective_state_update(&main, &mut args)?;
//! }
//! fwd.end()?;
//!
//! // Fused: no seed kernel at all; layer 0's SSU derives its stock seed, each SSU also stores
//! // the next layer's (one chain per forward).
//! let mut fwd = prefetcher.fused_forward(&main, &mut gen)?;
//! for _ in 0..layers {
//!     let seed = fwd.seed()?;
//!     let mut args = SsuArgs::new(
//!         TensorMut::contiguous(&mut state, &[slots, nheads, dim, dstate])?,
//!         Tensor::contiguous(&x, &[batch, nheads, dim])?,
//!         Tensor::new(&dt, &[batch, nheads, dim], &[nheads, 1, 0])?,
//!         Tensor::new(&a, &[nheads, dim, dstate], &[1, 0, 0])?,
//!         Tensor::contiguous(&bc, &[batch, ngroups, dstate])?,
//!         Tensor::contiguous(&bc, &[batch, ngroups, dstate])?,
//!         TensorMut::contiguous(&mut out, &[batch, nheads, dim])?,
//!     )
//!     .stochastic_rounding(SeedSource::Fused(seed), 5);
//!     selective_state_update(&main, &mut args)?;
//! }
//! fwd.end()?;
//! # Ok(()) }
//! ```
//!
//! Under CUDA-graph capture the same loops are captured once; call
//! [`prefetch::Prefetcher::prepare_replay`] before each replay (the draws then read the
//! generator state from device memory, as torch's RNG does). The [`ssu`] module documents the
//! SSU's shape/stride table and its seed sources.
//!
//! ## From C and C++
//!
//! The same kernels and launchers are the C ABI `csrc/include/mamba_ssu.h`
//! (`mamba_ssu_draw_seeds`, `mamba_ssu_prefetcher_*`, and the SSU of both forms as one
//! contract: `mamba_ssu_check` / `mamba_ssu_launch` / `mamba_ssu_plan` over FlashInfer's
//! arguments as tensor descriptors; every launcher takes a stream and device pointers,
//! validates, and returns a status code, and a rejection names its argument);
//! `scripts/c-package.sh` lays out the header and the static library, and
//! `examples/c/prefetch_demo.c` is a complete program.
//!
//! ## Layers
//!
//! `csrc/` (kernels and the C ABI) → a private FFI module (bindgen) → the safe modules below,
//! named by domain:
//! - [`philox`], [`generator`]: the CPU reference of torch's seed formula and the generator
//!   state (host, and device-resident for CUDA graphs);
//! - [`seeds`]: batched and graph-safe seed draws on the GPU;
//! - [`prefetch`]: the seed prefetcher (side stream, events, forward scopes, stock fallback,
//!   fused seeds);
//! - [`ssu`]: the FlashInfer-compatible selective-state-update, single and multi token;
//! - [`tensor`]: the type-erased device tensor views and layouts the kernels take;
//! - [`reference`](mod@reference): CPU references the GPU tests hold the kernels to (SSU in
//!   f64, stochastic rounding, FlashInfer's random mapping);
//! - [`device`], [`error`]: opening a device without panicking; the error type.
//!
//! ## Benchmark scaffolding (feature `bench-support`, unstable)
//!
//! `decode` (a simulated decode step) and `filler` (a stand-in for a layer's other kernels)
//! exist for this crate's benchmarks, tests and example, which enable the cargo feature
//! `bench-support` themselves. They are not part of the library's API: no stability or semver
//! guarantee, they may change or go in any release, and a library user should not enable the
//! feature.
//!
//! Every GPU function is asynchronous on the stream it is given and checks its arguments
//! before launching anything: invalid input is an [`Error`], never a panic or a bad launch.
//! The SSU's contract (shapes, dtypes, strides, sizes, options, the seed) is written once, in
//! the C ABI's check (`mamba_ssu_check`), which this crate, the torch extension and C callers
//! share: both SSU forms hand it one `mamba_ssu_args` built from their tensor views, and its
//! rejection is an [`Error::InvalidArgument`] or [`Error::Unsupported`] naming the argument.
//! The Rust layer adds what C cannot see — buffer lengths, devices, lifetimes — see [`ssu`].

#![warn(missing_docs)]

#[cfg(test)]
mod contract_tests;
#[cfg(feature = "bench-support")]
pub mod decode;
pub mod device;
pub mod error;
mod ffi;
#[cfg(feature = "bench-support")]
pub mod filler;
pub mod generator;
pub mod philox;
pub mod prefetch;
pub mod reference;
pub mod seeds;
pub mod ssu;
pub mod tensor;

pub use error::{Error, Result};
pub use generator::{Generator, GraphSeedState};
