//! CPU references the GPU kernels are held to (layer: pure host Rust, no device needed).
//!
//! - [`sr`]: the software fp32 → fp16 stochastic rounding FlashInfer uses on the H200
//!   ([`sr::sr_f16_bits`], bit exact; 0.7.4's [`sr::sr_f16_bits_v074`], [`sr::SrRule`]) and which 13 random bits each state element gets
//!   ([`sr::SrMapping`], from Philox, per kernel layout).
//! - [`ssu`]: the selective-state-update in f64 on host arrays
//!   ([`ssu::selective_state_update_f64`]), with pads, destination slots and the optional
//!   tensors, and the predicted stochastically rounded fp16 state
//!   ([`ssu::predict_sr_state_f16`]; under either release's conversion
//!   [`ssu::predict_sr_state_f16_with_rule`]).
//!
//! - [`horizontal`]: FlashInfer's "horizontal" single-token kernel in fp32, bit for bit given
//!   the values it computes with approximate instructions
//!   ([`horizontal::selective_state_update_horizontal_f32`], [`horizontal::horizontal_visits`]).
//!
//! - [`int16`]: FlashInfer's int16 block-scaled state (`state_scale`): the dequantised state
//!   the f64 references take ([`int16::dequantize_state`]) and the int16 rows and decode
//!   scales written from their result ([`int16::quantize_row`], [`int16::predict_int16_state`],
//!   [`int16::predict_int16_mtp`]).
//!
//! - [`mtp`]: the multi-token (speculative-decoding verify) selective-state-update in f64
//!   ([`mtp::selective_state_update_mtp_f64`]): fixed-length and varlen sequences, read slots
//!   with `num_accepted_tokens`, and the three write modes, with every write recorded.
//!
//! The seed draws' reference is [`crate::philox`].

pub mod cvt_rs;
pub mod horizontal;
pub mod int16;
pub mod mtp;
pub mod sr;
pub mod ssu;

pub use horizontal::{horizontal_visits, selective_state_update_horizontal_f32, HorizontalScalars};
pub use mtp::{selective_state_update_mtp_f64, MtpHostArgs, MtpReference, MtpTarget, MtpWrite};
pub use sr::{sr_f16_bits, sr_f16_bits_v074, SrMapping, SrRule};
pub use ssu::{
    predict_sr_state_f16, predict_sr_state_f16_with_rule, selective_state_update_f64, HostTensor,
    SsuHostArgs, SsuReference, StateWrite,
};
