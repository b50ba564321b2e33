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
//! the safe modules below, named by domain.

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

pub use error::{Error, Result};
pub use generator::{Generator, GraphSeedState};
