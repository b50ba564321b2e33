//! The arguments of one selective-state-update call: the borrowed tensors and flags
//! ([`SsuArgs`], [`SeedSource`], [`Algorithm`]), and their host-side description that
//! validation checks ([`SsuSpec`], [`SeedSpec`]) and the sizes it returns ([`SsuProblem`]).

use std::fmt;

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::CudaContext;

use crate::error::Result;
use crate::ffi::sys;
use crate::generator::GraphSeedState;
use crate::prefetch::{FusedSeed, SeedPtr};
use crate::tensor::{DType, Tensor, TensorLayout, TensorMut};

/// Which of FlashInfer's two kernels the results must match: it fixes the per-element random
/// bits of stochastic rounding and the summation order of `out`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// FlashInfer's rule: [`Algorithm::Simple`] when `batch * nheads < 2 * SMs`, else
    /// [`Algorithm::Vertical`] (see [`Algorithm::resolve`]).
    #[default]
    Auto,
    /// FlashInfer's "simple" kernel.
    Simple,
    /// FlashInfer's "vertical" kernel.
    Vertical,
}

impl Algorithm {
    /// The kernel this choice runs for `batch * nheads` on a device with `num_sms`
    /// multiprocessors: `Simple` or `Vertical`, never `Auto` (FlashInfer's rule for `Auto`).
    pub fn resolve(self, batch: usize, nheads: usize, num_sms: u32) -> Algorithm {
        match self {
            Algorithm::Auto => {
                if (batch as u128) * (nheads as u128) < 2 * u128::from(num_sms) {
                    Algorithm::Simple
                } else {
                    Algorithm::Vertical
                }
            }
            other => other,
        }
    }

    /// [`Algorithm::resolve`] on the device of `ctx` (reads its multiprocessor count).
    pub fn resolve_on(self, ctx: &CudaContext, batch: usize, nheads: usize) -> Result<Algorithm> {
        Ok(self.resolve(batch, nheads, num_sms(ctx)?))
    }

    pub(super) fn ffi(self) -> i32 {
        (match self {
            Algorithm::Auto => sys::MAMBA_SSU_ALGO_AUTO,
            Algorithm::Simple => sys::MAMBA_SSU_ALGO_SIMPLE,
            Algorithm::Vertical => sys::MAMBA_SSU_ALGO_VERTICAL,
        }) as i32
    }
}

/// The multiprocessor count of `ctx`'s device (at least 1).
pub(super) fn num_sms(ctx: &CudaContext) -> Result<u32> {
    let n = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    Ok(n.max(1) as u32)
}

/// Where the stochastic-rounding seed comes from.
pub enum SeedSource<'a> {
    /// One int64 in device memory, read by the kernel (FlashInfer's `rand_seed`).
    Pointer(Tensor<'a>),
    /// Fused: the kernel computes the seed itself as the stock torch draw at generator offset
    /// `state.offset + offset` (read from `state`'s device memory when the kernel runs), i.e.
    /// [`crate::philox::torch_seed`]`(seed, offset_now + offset)`. `offset` is a multiple of 4.
    FromGenerator {
        /// The device-resident generator state.
        state: &'a GraphSeedState,
        /// Offset added to the device state's offset (intragraph offset; a multiple of 4).
        offset: u64,
    },
    /// Fused, eager: the kernel computes the seed as the stock torch draw from generator state
    /// `(seed, offset)` given here, i.e. [`crate::philox::torch_seed`]`(seed, offset)`; no
    /// device memory is read. `offset` is a multiple of 4.
    FromValues {
        /// The generator's seed.
        seed: u64,
        /// The draw's generator offset (a multiple of 4).
        offset: u64,
    },
    /// A seed handed out by the [`crate::prefetch::Prefetcher`] (prefetched from its batched
    /// draw, or drawn inline by the stock path): one int64 in the prefetcher's device memory.
    Prefetched(SeedPtr<'a>),
    /// The fused path from [`crate::prefetch::Prefetcher::fused_seed`]: the kernel derives the
    /// stock seed itself (from values eagerly, from the prefetcher's device generator state
    /// under capture).
    Fused(FusedSeed<'a>),
}

impl fmt::Debug for SeedSource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeedSource::Pointer(t) => f.debug_tuple("Pointer").field(t).finish(),
            SeedSource::FromGenerator { offset, .. } => f
                .debug_struct("FromGenerator")
                .field("offset", offset)
                .finish_non_exhaustive(),
            SeedSource::FromValues { seed, offset } => f
                .debug_struct("FromValues")
                .field("seed", seed)
                .field("offset", offset)
                .finish(),
            SeedSource::Prefetched(p) => f.debug_tuple("Prefetched").field(p).finish(),
            SeedSource::Fused(p) => f.debug_tuple("Fused").field(p).finish(),
        }
    }
}

impl SeedSource<'_> {
    /// The seed as validation sees it.
    pub(super) fn spec(&self) -> SeedSpec {
        match self {
            SeedSource::Pointer(t) => SeedSpec::Pointer(*t.layout()),
            SeedSource::FromGenerator { offset, .. } => SeedSpec::FromGenerator { offset: *offset },
            SeedSource::FromValues { seed, offset } => SeedSpec::FromValues {
                seed: *seed,
                offset: *offset,
            },
            SeedSource::Prefetched(_) => SeedSpec::Pointer(PREFETCHED_SEED_LAYOUT),
            SeedSource::Fused(f) => match (f.linked_seed(), f.generator_state()) {
                // A chained call reads the seed its predecessor stored.
                (Some(_), _) => SeedSpec::Pointer(PREFETCHED_SEED_LAYOUT),
                (None, Some(_)) => SeedSpec::FromGenerator {
                    offset: f.seed_offset(),
                },
                (None, None) => SeedSpec::FromValues {
                    seed: f.generator_seed(),
                    offset: f.seed_offset(),
                },
            },
        }
    }
}

/// The arguments of one [`selective_state_update`](super::selective_state_update) call
/// (FlashInfer's names; see the [module doc](super) for the contract). [`SsuArgs::new`] fills
/// the defaults; the builder methods set the rest.
#[derive(Debug)]
pub struct SsuArgs<'a> {
    /// State cache (slots, nheads, dim, dstate), updated in place.
    pub state: TensorMut<'a>,
    /// Input (batch, nheads, dim).
    pub x: Tensor<'a>,
    /// Time step (batch, nheads, dim), strides (any, 1, 0).
    pub dt: Tensor<'a>,
    /// `A` (nheads, dim, dstate), strides (1, 0, 0), F32.
    pub a: Tensor<'a>,
    /// `B` (batch, ngroups, dstate).
    pub b: Tensor<'a>,
    /// `C` (batch, ngroups, dstate).
    pub c: Tensor<'a>,
    /// Optional skip weight `D` (nheads, dim), strides (1, 0).
    pub d: Option<Tensor<'a>>,
    /// Optional gate `z` (batch, nheads, dim).
    pub z: Option<Tensor<'a>>,
    /// Optional `dt_bias` (nheads, dim), strides (1, 0).
    pub dt_bias: Option<Tensor<'a>>,
    /// Optional read slots (batch,) or (batch, T), I32 or I64.
    pub state_batch_indices: Option<Tensor<'a>>,
    /// Optional write slots, same form and dtype as `state_batch_indices`.
    pub dst_state_batch_indices: Option<Tensor<'a>>,
    /// Output (batch, nheads, dim), written.
    pub out: TensorMut<'a>,
    /// Slot value that marks a padded batch entry (default -1).
    pub pad_slot_id: i64,
    /// Apply softplus to `dt + dt_bias` (default false).
    pub dt_softplus: bool,
    /// Write the updated state (default true).
    pub update_state: bool,
    /// 0 (default): round the state to nearest; 1..=10: stochastic rounding of an F16 state
    /// with that many Philox rounds (needs `seed`).
    pub philox_rounds: u32,
    /// Which FlashInfer kernel to match (default [`Algorithm::Auto`]).
    pub algorithm: Algorithm,
    /// The stochastic-rounding seed; ignored when `philox_rounds == 0`.
    pub seed: Option<SeedSource<'a>>,
}

impl<'a> SsuArgs<'a> {
    /// The required tensors, with defaults: no `D`, `z`, `dt_bias` or indices,
    /// `pad_slot_id = -1`, no softplus, state updated, round to nearest, [`Algorithm::Auto`].
    pub fn new(
        state: TensorMut<'a>,
        x: Tensor<'a>,
        dt: Tensor<'a>,
        a: Tensor<'a>,
        b: Tensor<'a>,
        c: Tensor<'a>,
        out: TensorMut<'a>,
    ) -> Self {
        Self {
            state,
            x,
            dt,
            a,
            b,
            c,
            d: None,
            z: None,
            dt_bias: None,
            state_batch_indices: None,
            dst_state_batch_indices: None,
            out,
            pad_slot_id: -1,
            dt_softplus: false,
            update_state: true,
            philox_rounds: 0,
            algorithm: Algorithm::Auto,
            seed: None,
        }
    }

    /// Sets `D`.
    pub fn d(mut self, d: Tensor<'a>) -> Self {
        self.d = Some(d);
        self
    }

    /// Sets the gate `z`.
    pub fn z(mut self, z: Tensor<'a>) -> Self {
        self.z = Some(z);
        self
    }

    /// Sets `dt_bias`.
    pub fn dt_bias(mut self, dt_bias: Tensor<'a>) -> Self {
        self.dt_bias = Some(dt_bias);
        self
    }

    /// Sets the read slots.
    pub fn state_batch_indices(mut self, indices: Tensor<'a>) -> Self {
        self.state_batch_indices = Some(indices);
        self
    }

    /// Sets the write slots.
    pub fn dst_state_batch_indices(mut self, indices: Tensor<'a>) -> Self {
        self.dst_state_batch_indices = Some(indices);
        self
    }

    /// Sets `pad_slot_id`.
    pub fn pad_slot_id(mut self, pad_slot_id: i64) -> Self {
        self.pad_slot_id = pad_slot_id;
        self
    }

    /// Sets `dt_softplus`.
    pub fn dt_softplus(mut self, on: bool) -> Self {
        self.dt_softplus = on;
        self
    }

    /// Sets `update_state` (false: FlashInfer's `disable_state_update`).
    pub fn update_state(mut self, on: bool) -> Self {
        self.update_state = on;
        self
    }

    /// Sets the algorithm.
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Enables stochastic rounding with `philox_rounds` rounds (1..=10) and `seed`.
    pub fn stochastic_rounding(mut self, seed: SeedSource<'a>, philox_rounds: u32) -> Self {
        self.seed = Some(seed);
        self.philox_rounds = philox_rounds;
        self
    }

    /// The layouts and flags [`validate`](super::validate) checks.
    pub fn spec(&self) -> SsuSpec {
        SsuSpec {
            state: *self.state.layout(),
            x: *self.x.layout(),
            dt: *self.dt.layout(),
            a: *self.a.layout(),
            b: *self.b.layout(),
            c: *self.c.layout(),
            d: self.d.as_ref().map(|t| *t.layout()),
            z: self.z.as_ref().map(|t| *t.layout()),
            dt_bias: self.dt_bias.as_ref().map(|t| *t.layout()),
            state_batch_indices: self.state_batch_indices.as_ref().map(|t| *t.layout()),
            dst_state_batch_indices: self.dst_state_batch_indices.as_ref().map(|t| *t.layout()),
            out: *self.out.layout(),
            philox_rounds: self.philox_rounds,
            seed: self.seed.as_ref().map(SeedSource::spec),
        }
    }
}

/// The seed as [`validate`](super::validate) sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedSpec {
    /// [`SeedSource::Pointer`]: the layout of the seed tensor.
    Pointer(TensorLayout),
    /// [`SeedSource::FromGenerator`] with this offset.
    FromGenerator {
        /// The offset added to the device generator state's offset.
        offset: u64,
    },
    /// [`SeedSource::FromValues`].
    FromValues {
        /// The generator's seed.
        seed: u64,
        /// The draw's generator offset.
        offset: u64,
    },
}

/// Everything [`validate`](super::validate) checks: the layouts of every tensor and the flags
/// that constrain them (no device memory involved). [`SsuArgs::spec`] builds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsuSpec {
    /// `state`.
    pub state: TensorLayout,
    /// `x`.
    pub x: TensorLayout,
    /// `dt`.
    pub dt: TensorLayout,
    /// `A`.
    pub a: TensorLayout,
    /// `B`.
    pub b: TensorLayout,
    /// `C`.
    pub c: TensorLayout,
    /// `D`.
    pub d: Option<TensorLayout>,
    /// `z`.
    pub z: Option<TensorLayout>,
    /// `dt_bias`.
    pub dt_bias: Option<TensorLayout>,
    /// `state_batch_indices`.
    pub state_batch_indices: Option<TensorLayout>,
    /// `dst_state_batch_indices`.
    pub dst_state_batch_indices: Option<TensorLayout>,
    /// `out`.
    pub out: TensorLayout,
    /// Philox rounds (0: round to nearest).
    pub philox_rounds: u32,
    /// The seed, if any.
    pub seed: Option<SeedSpec>,
}

/// The sizes and dtypes of a validated call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsuProblem {
    /// Batch entries (`x.size(0)`).
    pub batch: usize,
    /// Heads.
    pub nheads: usize,
    /// Head dimension (rows per head).
    pub dim: usize,
    /// State columns.
    pub dstate: usize,
    /// Groups of `B` and `C`.
    pub ngroups: usize,
    /// State cache slots (`state.size(0)`).
    pub cache_slots: usize,
    /// State dtype.
    pub state_dtype: DType,
    /// Dtype of `x`, `z`, `B`, `C`, `out`.
    pub input_dtype: DType,
    /// Dtype of `dt`, `D`, `dt_bias`.
    pub weight_dtype: DType,
    /// Dtype of the index tensors, if any is given.
    pub index_dtype: Option<DType>,
    /// Whether the state is stochastically rounded (`philox_rounds > 0`).
    pub stochastic_rounding: bool,
}

/// The layout of a prefetched seed: one int64.
const PREFETCHED_SEED_LAYOUT: TensorLayout = TensorLayout::one_i64();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_resolution_matches_the_launcher() {
        for (batch, nheads, sms) in [
            (1, 32, 132),
            (8, 32, 132),
            (9, 32, 132),
            (4, 66, 132),
            (4, 65, 132),
            (1, 1, 1),
            (1, 2, 1),
            (256, 128, 132),
        ] {
            let ours = Algorithm::Auto.resolve(batch, nheads, sms);
            let expect = if batch * nheads < 2 * sms as usize {
                Algorithm::Simple
            } else {
                Algorithm::Vertical
            };
            assert_eq!(ours, expect);
            // SAFETY: a pure function of its arguments when num_sms > 0 (no device query).
            let c = unsafe {
                sys::mamba_ssu_resolve_algorithm(
                    Algorithm::Auto.ffi(),
                    batch as i64,
                    nheads as i64,
                    sms as i32,
                )
            };
            assert_eq!(c, ours.ffi(), "batch {batch} nheads {nheads} sms {sms}");
        }
        assert_eq!(Algorithm::Simple.resolve(1000, 1000, 1), Algorithm::Simple);
        assert_eq!(Algorithm::Vertical.resolve(1, 1, 132), Algorithm::Vertical);
    }
}
