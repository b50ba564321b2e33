//! The one place the GPU tests call the safe SSU API (`mamba_ssu::ssu`): a description of a
//! call over [`DevBuf`]s with manifest-style shapes and strides, turned into `SsuArgs`.
//! Included only by the GPU test files (`#[path = "common/ssu_dev.rs"] mod ssu_dev;`), so the
//! CPU tests do not depend on that API.
#![allow(dead_code)]

use std::sync::Arc;

use cudarc::driver::CudaStream;
use mamba_ssu::ssu::{self, Algorithm, SeedSource, SrRule, SsuArgs, Tensor, TensorMut};

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

/// Flags of one call.
#[derive(Clone, Copy, Debug)]
pub struct Flags {
    /// Pad slot id.
    pub pad_slot_id: i64,
    /// Softplus on dt.
    pub dt_softplus: bool,
    /// FlashInfer's `disable_state_update`: the state is not written.
    pub disable_state_update: bool,
    /// 0 = round to nearest.
    pub philox_rounds: u32,
    /// `auto`, `simple`, `vertical`, `horizontal`.
    pub algorithm: &'static str,
}

/// One SSU call.
pub struct Call<'a> {
    /// State (cache_slots, nheads, dim, dstate).
    pub state: Out<'a>,
    /// x (batch, nheads, dim).
    pub x: In<'a>,
    /// dt (batch, nheads, dim), strides (s, 1, 0).
    pub dt: In<'a>,
    /// A (nheads, dim, dstate), strides (1, 0, 0).
    pub a: In<'a>,
    /// B (batch, ngroups, dstate).
    pub b: In<'a>,
    /// C.
    pub c: In<'a>,
    /// D (nheads, dim), strides (1, 0).
    pub d: Option<In<'a>>,
    /// z like x.
    pub z: Option<In<'a>>,
    /// dt_bias like D.
    pub dt_bias: Option<In<'a>>,
    /// out like x.
    pub out: Out<'a>,
    /// The decode scales of an int16 state (slots, nheads, dim), written.
    pub state_scale: Option<Out<'a>>,
    /// Read slots.
    pub state_batch_indices: Option<In<'a>>,
    /// Write slots.
    pub dst_state_batch_indices: Option<In<'a>>,
    /// One int64 in device memory.
    pub seed: Option<In<'a>>,
    /// Flags.
    pub flags: Flags,
}

/// Parses an algorithm name.
pub fn algorithm(name: &str) -> Algorithm {
    match name {
        "auto" => Algorithm::Auto,
        "simple" => Algorithm::Simple,
        "vertical" => Algorithm::Vertical,
        "horizontal" => Algorithm::Horizontal,
        other => panic!("unknown algorithm {other}"),
    }
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
pub fn launch(stream: &Arc<CudaStream>, call: &mut Call<'_>) -> mamba_ssu::Result<()> {
    launch_with_rule(stream, call, SrRule::V072)
}

/// [`launch`] with the stochastic-rounding conversion `rule` (`SsuArgs::sr_rule`).
pub fn launch_with_rule(
    stream: &Arc<CudaStream>,
    call: &mut Call<'_>,
    rule: SrRule,
) -> mamba_ssu::Result<()> {
    launch_seeded(stream, call, rule, None)
}

/// [`launch_with_rule`] with a fused seed: the kernel derives the stock torch draw at
/// generator state `(seed, offset)` itself (`SeedSource::FromValues`) instead of reading
/// `call.seed`, with `call.flags.philox_rounds` rounds.
pub fn launch_fused(
    stream: &Arc<CudaStream>,
    call: &mut Call<'_>,
    rule: SrRule,
    seed: u64,
    offset: u64,
) -> mamba_ssu::Result<()> {
    launch_seeded(stream, call, rule, Some((seed, offset)))
}

fn launch_seeded(
    stream: &Arc<CudaStream>,
    call: &mut Call<'_>,
    rule: SrRule,
    fused: Option<(u64, u64)>,
) -> mamba_ssu::Result<()> {
    let seed = match fused {
        Some((seed, offset)) => Some(SeedSource::FromValues { seed, offset }),
        None => opt(&call.seed)?.map(SeedSource::Pointer),
    };
    let mut args = SsuArgs {
        state: tensor_mut(&mut call.state)?,
        x: tensor(&call.x)?,
        dt: tensor(&call.dt)?,
        a: tensor(&call.a)?,
        b: tensor(&call.b)?,
        c: tensor(&call.c)?,
        d: opt(&call.d)?,
        z: opt(&call.z)?,
        dt_bias: opt(&call.dt_bias)?,
        out: tensor_mut(&mut call.out)?,
        state_scale: call.state_scale.as_mut().map(tensor_mut).transpose()?,
        state_batch_indices: opt(&call.state_batch_indices)?,
        dst_state_batch_indices: opt(&call.dst_state_batch_indices)?,
        pad_slot_id: call.flags.pad_slot_id,
        dt_softplus: call.flags.dt_softplus,
        disable_state_update: call.flags.disable_state_update,
        philox_rounds: call.flags.philox_rounds,
        algorithm: algorithm(call.flags.algorithm),
        seed,
        sr_rule: rule,
    };
    ssu::selective_state_update(stream, &mut args)
}
