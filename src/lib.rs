//! # mamba-ssu
//!
//! CUDA kernels for the Mamba-2 decode step of hybrid language models (Nemotron-H class).
//!
//! An engine that keeps its SSM state cache in fp16 with stochastic rounding draws one seed per
//! Mamba-2 layer per decode step (`torch.randint(0, 2**32, (1,))` on the CUDA generator) and
//! then runs the selective-state-update (SSU) kernel, which reads that seed from device memory.
//! This crate draws a forward's N seeds in one launch, bit-identical to the stock sequence,
//! eagerly and across CUDA-graph replays, and provides a FlashInfer-compatible SSU kernel.
//!
//! ```no_run
//! use mamba_ssu::{device, philox, seeds, Generator};
//!
//! # fn main() -> Result<(), mamba_ssu::Error> {
//! let ctx = device::open(0)?;
//! let stream = ctx.new_stream()?;
//! let mut gen = Generator::new(42, 0)?;
//! let mut out = stream.alloc_zeros::<i64>(40)?;
//! let expected = gen.clone().draw_cpu(40);
//! seeds::draw_from(&stream, &mut gen, &mut out, 40)?; // one launch, 40 seeds
//! let got = stream.clone_dtoh(&out)?;
//! assert!(got.iter().zip(&expected).all(|(g, e)| *g as u64 == *e));
//! assert_eq!(expected[0], philox::torch_seed(42, 0));
//! # Ok(()) }
//! ```
//!
//! Layers: `csrc/` (kernels and the C ABI `mamba_ssu.h`) → a private FFI module (bindgen) →
//! the safe modules below, named by domain:
//! - [`philox`], [`generator`]: the CPU reference of torch's seed formula and the generator
//!   state (host, and device-resident for CUDA graphs);
//! - [`seeds`]: batched and graph-safe seed draws on the GPU;
//! - [`prefetch`]: the seed prefetcher (side stream, events, forward scopes, stock fallback,
//!   fused seeds) — the crate's reason to exist;
//! - [`ssu`]: the FlashInfer-compatible selective-state-update kernel with validation;
//! - [`tensor`]: the type-erased device tensor views and layouts the kernels take;
//! - [`reference`](mod@reference): CPU references the GPU tests hold the kernels to (SSU in f64, stochastic
//!   rounding, FlashInfer's random mapping);
//! - [`decode`], [`filler`]: a simulated decode step for benchmarks and tests;
//! - [`device`], [`error`]: opening a device without panicking; the error type.
//!
//! Every GPU function is asynchronous on the stream it is given and validates its arguments
//! before launching anything: invalid input is an [`Error`], never a panic or a bad launch.

#![warn(missing_docs)]

pub mod decode;
pub mod device;
pub mod error;
mod ffi;
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
