//! The one place the multi-token GPU tests call the safe multi-token SSU API
//! (`mamba_ssu::ssu::mtp`): a description of a call over [`DevBuf`]s with manifest-style shapes
//! and strides, turned into `MtpArgs`. Included only by the multi-token GPU test files
//! (`#[path = "common/mtp_dev.rs"] mod mtp_dev;`).
#![allow(dead_code)]

use std::sync::Arc;

use cudarc::driver::CudaStream;
use mamba_ssu::ssu::mtp::{selective_state_update_mtp, MtpArgs};
use mamba_ssu::ssu::{SeedSource, Tensor, TensorMut};

use crate::common::DevBuf;

/// A read-only tensor: a buffer plus shape and strides in elements.
pub struct In<'a> {
    /// Storage.
    pub buf: &'a DevBuf,
    /// Shape.
    pub shape: Vec<usize>,
    /// Strides (elements).
    pub strides: Vec<usize>,
}

/// A written tensor.
pub struct Out<'a> {
    /// Storage.
    pub buf: &'a mut DevBuf,
    /// Shape.
    pub shape: Vec<usize>,
    /// Strides (elements).
    pub strides: Vec<usize>,
}

/// One multi-token call (FlashInfer's argument names).
pub struct MtpCall<'a> {
    /// State (slots, nheads, dim, dstate).
    pub state: Out<'a>,
    /// x: (batch, T, nheads, dim), or (total_tokens, nheads, dim) with `cu_seqlens`.
    pub x: In<'a>,
    /// dt like x, strides (.., .., 1, 0).
    pub dt: In<'a>,
    /// A (nheads, dim, dstate), strides (1, 0, 0).
    pub a: In<'a>,
    /// B (.., ngroups, dstate).
    pub b: In<'a>,
    /// C like B.
    pub c: In<'a>,
    /// D (nheads, dim), strides (1, 0).
    pub d: Option<In<'a>>,
    /// z like x.
    pub z: Option<In<'a>>,
    /// dt_bias like D.
    pub dt_bias: Option<In<'a>>,
    /// out like x.
    pub out: Out<'a>,
    /// Read slots, 1-D or 2-D.
    pub state_batch_indices: Option<In<'a>>,
    /// Per-token write slots, 2-D.
    pub dst_state_batch_indices: Option<In<'a>>,
    /// Accepted-token counts.
    pub num_accepted_tokens: Option<In<'a>>,
    /// Varlen offsets.
    pub cu_seqlens: Option<In<'a>>,
    /// Intermediate state buffer (entries, cache_steps, nheads, dim, dstate).
    pub intermediate_states: Option<Out<'a>>,
    /// Buffer entry per sequence.
    pub intermediate_state_indices: Option<In<'a>>,
    /// Decode scales of an int16 state (slots, nheads, dim), written.
    pub state_scale: Option<Out<'a>>,
    /// Decode scales of an int16 intermediate buffer (batch, cache_steps, nheads, dim), written.
    pub intermediate_state_scales: Option<Out<'a>>,
    /// `cache_steps`, when passed.
    pub cache_steps: Option<usize>,
    /// Pad slot id.
    pub pad_slot_id: i64,
    /// Softplus on dt.
    pub dt_softplus: bool,
    /// FlashInfer's `disable_state_update`.
    pub disable_state_update: bool,
    /// 0 = round to nearest.
    pub philox_rounds: u32,
    /// One int64 in device memory (read when `philox_rounds > 0`).
    pub seed: Option<In<'a>>,
    /// The stochastic-rounding conversion.
    pub sr_rule: mamba_ssu::ssu::SrRule,
}

fn tensor<'a>(t: &'a In<'a>) -> mamba_ssu::Result<Tensor<'a>> {
    crate::with_devbuf!(t.buf, s => Tensor::new(s, &t.shape, &t.strides))
}

fn opt<'a>(t: &'a Option<In<'a>>) -> mamba_ssu::Result<Option<Tensor<'a>>> {
    t.as_ref().map(tensor).transpose()
}

fn tensor_mut<'a>(t: &'a mut Out<'_>) -> mamba_ssu::Result<TensorMut<'a>> {
    crate::with_devbuf!(&mut *t.buf, s => TensorMut::new(s, &t.shape, &t.strides))
}

/// Launches `call` on `stream` (asynchronous). Errors from building the tensors (layout
/// checks) are returned like the launch's own validation errors.
pub fn launch(stream: &Arc<CudaStream>, call: &mut MtpCall<'_>) -> mamba_ssu::Result<()> {
    let mut args = MtpArgs::new(
        tensor_mut(&mut call.state)?,
        tensor(&call.x)?,
        tensor(&call.dt)?,
        tensor(&call.a)?,
        tensor(&call.b)?,
        tensor(&call.c)?,
        tensor_mut(&mut call.out)?,
    )
    .pad_slot_id(call.pad_slot_id)
    .dt_softplus(call.dt_softplus)
    .disable_state_update(call.disable_state_update)
    .sr_rule(call.sr_rule);
    if let Some(t) = opt(&call.d)? {
        args = args.d(t);
    }
    if let Some(t) = opt(&call.z)? {
        args = args.z(t);
    }
    if let Some(t) = opt(&call.dt_bias)? {
        args = args.dt_bias(t);
    }
    if let Some(t) = opt(&call.state_batch_indices)? {
        args = args.state_batch_indices(t);
    }
    if let Some(t) = opt(&call.dst_state_batch_indices)? {
        args = args.dst_state_batch_indices(t);
    }
    if let Some(t) = opt(&call.num_accepted_tokens)? {
        args = args.num_accepted_tokens(t);
    }
    if let Some(t) = opt(&call.cu_seqlens)? {
        args = args.cu_seqlens(t);
    }
    if let Some(buf) = call.intermediate_states.as_mut() {
        args = args.intermediate_states(tensor_mut(buf)?);
    }
    if let Some(t) = opt(&call.intermediate_state_indices)? {
        args = args.intermediate_state_indices(t);
    }
    if let Some(buf) = call.state_scale.as_mut() {
        args = args.state_scale(tensor_mut(buf)?);
    }
    if let Some(buf) = call.intermediate_state_scales.as_mut() {
        args = args.intermediate_state_scales(tensor_mut(buf)?);
    }
    if let Some(cs) = call.cache_steps {
        args = args.cache_steps(cs);
    }
    if call.philox_rounds > 0 {
        let seed = call
            .seed
            .as_ref()
            .map(tensor)
            .transpose()?
            .map(SeedSource::Pointer);
        match seed {
            Some(seed) => args = args.stochastic_rounding(seed, call.philox_rounds),
            // No seed: let the API name the missing argument.
            None => args.philox_rounds = call.philox_rounds,
        }
    }
    selective_state_update_mtp(stream, &mut args)
}
