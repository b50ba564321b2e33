//! CPU references the GPU kernels are held to (layer: pure host Rust, no device needed).
//!
//! - [`sr`]: the software fp32 → fp16 stochastic rounding FlashInfer uses on the H200
//!   ([`sr::sr_f16_bits`], bit exact) and which 13 random bits each state element gets
//!   ([`sr::SrMapping`], from Philox, per kernel layout).
//! - [`ssu`]: the selective-state-update in f64 on host arrays
//!   ([`ssu::selective_state_update_f64`]), with pads, destination slots and the optional
//!   tensors, and the predicted stochastically rounded fp16 state
//!   ([`ssu::predict_sr_state_f16`]).
//!
//! The seed draws' reference is [`crate::philox`].

pub mod sr;
pub mod ssu;

pub use sr::{sr_f16_bits, sr_f16_bits_v074, SrMapping, SrRule};
pub use ssu::{
    predict_sr_state_f16, selective_state_update_f64, HostTensor, SsuHostArgs, SsuReference,
    StateWrite,
};
