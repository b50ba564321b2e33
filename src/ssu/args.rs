//! The arguments of one selective-state-update call: the borrowed tensors and flags
//! ([`SsuArgs`], [`Algorithm`]; the seed in `seed.rs`), their host-side description that
//! validation checks ([`SsuSpec`]) and the sizes the C check returns ([`SsuProblem`]).

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::CudaContext;

use crate::device::DeviceProps;
use crate::error::Result;
use crate::ffi;
use crate::ffi::sys;
use crate::reference::SrRule;
use crate::tensor::{DType, Tensor, TensorLayout, TensorMut};

use super::seed::{SeedSource, SeedSpec};

/// Which of FlashInfer's single-token kernels the results must match: it fixes the per-element
/// random bits of stochastic rounding, the summation order of `out` and the form of the state
/// update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// FlashInfer's rule: below sm_90 [`Algorithm::Simple`]; else `Simple` when
    /// `batch * nheads < 2 * SMs` or the head dim is not one its vertical kernel takes (a
    /// multiple of 16, at least 48: FlashInfer 0.7.4), from there on [`Algorithm::Vertical`] on
    /// the sm_90 family
    /// (see [`Algorithm::resolve`]) and, from sm_100 on, `Vertical` for an F32 state and
    /// [`Algorithm::Horizontal`] for an F16 or BF16 one whose head dim it takes (see
    /// [`Algorithm::resolve_for`]).
    #[default]
    Auto,
    /// FlashInfer's "simple" kernel.
    Simple,
    /// FlashInfer's "vertical" kernel.
    Vertical,
    /// FlashInfer's "horizontal" kernel (single token): head dims that are a multiple of 64 up
    /// to 256 (others are an [`Error::InvalidArgument`](crate::Error::InvalidArgument), as
    /// FlashInfer 0.7.4's launcher refuses them), any state dtype.
    Horizontal,
}

impl Algorithm {
    /// The kernel this choice runs for `batch * nheads` on a device of the sm_90 family
    /// with `num_sms` multiprocessors at a head dim its vertical kernel takes (e.g. 64):
    /// `Simple` or `Vertical` for `Auto` (FlashInfer's rule there), every other choice itself. Below sm_90 `Auto` is `Simple`
    /// ([`Algorithm::resolve_on`] reads the device); from sm_100 on it depends on the state
    /// dtype and head dim ([`Algorithm::resolve_for`]).
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

    /// The kernel this choice runs on the device of `ctx` for an F32 state, as the launch
    /// resolves it there (the library's rule over the device's properties,
    /// [`DeviceProps::of`], `mamba_ssu_resolve_algorithm_for_device`): below sm_90 `Auto` is
    /// `Simple`, as FlashInfer's kernels for those GPUs have that layout only; else
    /// [`Algorithm::resolve`]'s rule (an F32 state is never sent to `Horizontal`). For a 2-byte
    /// state, [`Algorithm::resolve_for`].
    pub fn resolve_on(self, ctx: &CudaContext, batch: usize, nheads: usize) -> Result<Algorithm> {
        let props = DeviceProps::of(ctx.ordinal())?.ffi();
        let wide = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        // SAFETY: `props` is valid for the call; the function reads it and touches no device.
        let r = unsafe {
            sys::mamba_ssu_resolve_algorithm_for_device(
                self.ffi(),
                wide(batch),
                wide(nheads),
                &props,
            )
        };
        Self::from_resolved(r)
    }

    /// The kernel a single-token call of `batch * nheads` heads of `dim` rows with a state of
    /// dtype `state` runs on a GPU with the properties `props`, as the launch resolves it
    /// (`mamba_ssu_resolve_algorithm_for_state`, a pure function): `Auto` by FlashInfer's rule
    /// (below sm_90 `Simple`; else `Simple` when `batch * nheads < 2 * SMs`; from there on
    /// `Vertical` on the sm_90 family; from sm_100 on `Vertical` for an F32 state and
    /// `Horizontal` for an F16 or BF16 one whose head dim is a multiple of 64 up to 256,
    /// `Vertical` for other head dims, FlashInfer 0.7.4's fallback); every other choice itself.
    ///
    /// Errors: [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a state dtype that
    /// is not a float, `dim` 0, or `Horizontal` with a head dim it does not take.
    pub fn resolve_for(
        self,
        props: &DeviceProps,
        batch: usize,
        nheads: usize,
        dim: usize,
        state: DType,
    ) -> Result<Algorithm> {
        let p = props.ffi();
        let wide = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        // SAFETY: `p` is valid for the call; the function reads it and touches no device.
        let r = unsafe {
            sys::mamba_ssu_resolve_algorithm_for_state(
                self.ffi(),
                wide(batch),
                wide(nheads),
                wide(dim),
                state.ffi(),
                &p,
            )
        };
        Self::from_resolved(r)
    }

    /// A resolver's result: a resolved algorithm, or minus a status.
    fn from_resolved(r: i32) -> Result<Algorithm> {
        if r < 0 {
            ffi::check(-r)?;
        }
        Ok(if r == sys::MAMBA_SSU_ALGO_SIMPLE as i32 {
            Algorithm::Simple
        } else if r == sys::MAMBA_SSU_ALGO_HORIZONTAL as i32 {
            Algorithm::Horizontal
        } else {
            Algorithm::Vertical
        })
    }

    pub(super) fn ffi(self) -> i32 {
        (match self {
            Algorithm::Auto => sys::MAMBA_SSU_ALGO_AUTO,
            Algorithm::Simple => sys::MAMBA_SSU_ALGO_SIMPLE,
            Algorithm::Vertical => sys::MAMBA_SSU_ALGO_VERTICAL,
            Algorithm::Horizontal => sys::MAMBA_SSU_ALGO_HORIZONTAL,
        }) as i32
    }
}

/// The multiprocessor count of `ctx`'s device (at least 1).
pub(super) fn num_sms(ctx: &CudaContext) -> Result<u32> {
    let n = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    Ok(n.max(1) as u32)
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
    /// Optional read slots (>= batch,) or (>= batch, T), I32 or I64 (padded tensors: column 0
    /// of the first batch rows is read).
    pub state_batch_indices: Option<Tensor<'a>>,
    /// Optional write slots, of the same forms, the dtype of `state_batch_indices`.
    pub dst_state_batch_indices: Option<Tensor<'a>>,
    /// Output (batch, nheads, dim), written.
    pub out: TensorMut<'a>,
    /// Optional decode scales of an [`DType::I16`] state (FlashInfer's block-scaled state):
    /// F32 (slots, nheads, dim) (or a trailing 1), strides (any >= nheads * dim, dim, 1), one per
    /// state row: the state reads as `rn(q * scale[read slot, h, d])`, and each written row is
    /// quantised from its fp32 values with the encode factor `32767 / max |row|` (FlashInfer's
    /// approximate reciprocal) and its decode scale written at the write slot. Without it an
    /// I16 state is read as its integers and written rounded and clamped to ±32767. Not with
    /// stochastic rounding (FlashInfer's rule).
    pub state_scale: Option<TensorMut<'a>>,
    /// Slot value that marks a padded batch entry (default -1).
    pub pad_slot_id: i64,
    /// Apply softplus to `dt + dt_bias` (default false).
    pub dt_softplus: bool,
    /// FlashInfer's `disable_state_update` (default false): leave the state untouched instead
    /// of writing the updated state.
    pub disable_state_update: bool,
    /// 0 (default): round the state to nearest; any other count (up to `i32::MAX`):
    /// stochastic rounding of an F16 state with that many Philox rounds (needs `seed`).
    pub philox_rounds: u32,
    /// Which FlashInfer kernel to match (default [`Algorithm::Auto`]).
    pub algorithm: Algorithm,
    /// The stochastic-rounding seed; ignored when `philox_rounds == 0`.
    pub seed: Option<SeedSource<'a>>,
    /// The fp32 → fp16 conversion of stochastic rounding (default [`SrRule::V072`], FlashInfer
    /// 0.7.2's, which the hot compiled-in kernels serve); ignored when `philox_rounds == 0`.
    /// [`SrRule::V074`] runs the generic kernel (same random bits and summation order, slower).
    pub sr_rule: SrRule,
}

impl<'a> SsuArgs<'a> {
    /// The required tensors, with defaults: no `D`, `z`, `dt_bias` or indices,
    /// `pad_slot_id = -1`, no softplus, state written (`disable_state_update` false), round to
    /// nearest, [`Algorithm::Auto`],
    /// [`SrRule::V072`].
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
            state_scale: None,
            pad_slot_id: -1,
            dt_softplus: false,
            disable_state_update: false,
            philox_rounds: 0,
            algorithm: Algorithm::Auto,
            seed: None,
            sr_rule: SrRule::V072,
        }
    }

    /// Sets `D`.
    pub fn d(mut self, d: Tensor<'a>) -> Self {
        self.d = Some(d);
        self
    }

    /// Sets the decode scales of an I16 state ([`SsuArgs::state_scale`]).
    pub fn state_scale(mut self, scale: TensorMut<'a>) -> Self {
        self.state_scale = Some(scale);
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

    /// Sets FlashInfer's `disable_state_update` (true: the state is not written).
    pub fn disable_state_update(mut self, on: bool) -> Self {
        self.disable_state_update = on;
        self
    }

    /// Sets the algorithm.
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Enables stochastic rounding with `philox_rounds` rounds (>= 1; FlashInfer sets no upper
    /// bound) and `seed`.
    pub fn stochastic_rounding(mut self, seed: SeedSource<'a>, philox_rounds: u32) -> Self {
        self.seed = Some(seed);
        self.philox_rounds = philox_rounds;
        self
    }

    /// Sets the stochastic-rounding conversion: [`SrRule::V072`] (the default, FlashInfer
    /// 0.7.2's, what engines pin) or [`SrRule::V074`] (FlashInfer 0.7.4's: Inf stays Inf, NaN
    /// stays NaN, finite values past 65504 saturate to Inf, values below 2^-14 round
    /// stochastically onto fp16 subnormals). The random bits per element are the same under
    /// both; the two agree for every finite result of magnitude at least 2^-14. Only matters
    /// with [`SsuArgs::stochastic_rounding`]; with it, `V074` runs the generic kernel (slower
    /// than the compiled-in kernels of the hot shapes, which implement 0.7.2's rule).
    pub fn sr_rule(mut self, rule: SrRule) -> Self {
        self.sr_rule = rule;
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
            state_scale: self.state_scale.as_ref().map(|t| *t.layout()),
            philox_rounds: self.philox_rounds,
            sr_rule: self.sr_rule,
            seed: self.seed.as_ref().map(SeedSource::spec),
        }
    }
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
    /// `state_scale` (an I16 state's decode scales, [`SsuArgs::state_scale`]).
    pub state_scale: Option<TensorLayout>,
    /// Philox rounds (0: round to nearest).
    pub philox_rounds: u32,
    /// The stochastic-rounding conversion ([`SsuArgs::sr_rule`]).
    pub sr_rule: SrRule,
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
    /// Dtype of the slot indices (`state_batch_indices`, else `dst_state_batch_indices`: the
    /// two have one dtype), if any is given.
    pub index_dtype: Option<DType>,
    /// Whether the state is stochastically rounded (`philox_rounds > 0`).
    pub stochastic_rounding: bool,
    /// The stochastic-rounding conversion the call asked for (meaningful only with
    /// `stochastic_rounding`).
    pub sr_rule: SrRule,
}

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
        assert_eq!(
            Algorithm::Horizontal.resolve(1, 1, 132),
            Algorithm::Horizontal
        );
    }

    /// `Auto` per GPU with the state dtype and head dim (FlashInfer's rule): HORIZONTAL from
    /// sm_100 on for an F16 or BF16 state whose head dim it takes, above the SM-count switch;
    /// VERTICAL for an F32 state or another head dim there, and on the sm_90 family; SIMPLE below
    /// the switch and below sm_90.
    #[test]
    fn auto_resolution_per_gpu_state_and_head_dim() {
        use Algorithm::{Auto, Horizontal, Simple, Vertical};
        let h200 = DeviceProps::sm90(132).unwrap();
        let b200 = DeviceProps {
            compute_capability: (10, 0),
            num_sms: 148,
            ..h200
        };
        let a100 = DeviceProps {
            compute_capability: (8, 0),
            num_sms: 108,
            ..h200
        };
        let big = (64usize, 128usize); // 8192 heads: above every switch
        for (props, state, dim, want) in [
            (&b200, DType::F16, 64, Horizontal),
            (&b200, DType::BF16, 256, Horizontal),
            (&b200, DType::F16, 192, Horizontal),
            (&b200, DType::F32, 64, Vertical),
            (&b200, DType::F16, 80, Vertical),
            (&b200, DType::BF16, 320, Vertical),
            (&h200, DType::F16, 64, Vertical),
            (&h200, DType::F32, 128, Vertical),
            (&a100, DType::F16, 64, Simple),
        ] {
            let got = Auto.resolve_for(props, big.0, big.1, dim, state).unwrap();
            assert_eq!(got, want, "{props:?} {state:?} dim {dim}");
        }
        // Below the switch: SIMPLE everywhere.
        assert_eq!(
            Auto.resolve_for(&b200, 1, 32, 64, DType::F16).unwrap(),
            Simple
        );
        // Explicit choices resolve to themselves; HORIZONTAL refuses a head dim it does not take.
        assert_eq!(
            Horizontal
                .resolve_for(&h200, 1, 1, 128, DType::F32)
                .unwrap(),
            Horizontal
        );
        for dim in [16usize, 80, 320] {
            let e = Horizontal
                .resolve_for(&b200, 1, 1, dim, DType::F16)
                .unwrap_err();
            assert!(
                matches!(
                    e,
                    crate::Error::InvalidArgument {
                        argument: "algorithm",
                        ..
                    }
                ),
                "{e}"
            );
        }
        let e = Auto.resolve_for(&b200, 1, 1, 64, DType::I32).unwrap_err();
        assert!(
            matches!(
                e,
                crate::Error::InvalidArgument {
                    argument: "state_dtype",
                    ..
                }
            ),
            "{e}"
        );
    }
}
