//! The arguments of one multi-token call: the borrowed tensors and flags ([`MtpArgs`]), their
//! host-side description that validation checks ([`MtpSpec`]), the sizes the C check returns
//! ([`MtpProblem`]) and the launch configuration ([`MtpLaunchPlan`]).

use crate::reference::SrRule;
use crate::ssu::{SeedSource, SeedSpec};
use crate::tensor::{DType, Tensor, TensorLayout, TensorMut};

/// The arguments of one [`selective_state_update_mtp`](super::selective_state_update_mtp)
/// call (FlashInfer's names; see the [module doc](super) for the shapes). [`MtpArgs::new`]
/// fills the defaults; the builder methods set the rest.
#[derive(Debug)]
pub struct MtpArgs<'a> {
    /// State cache (slots, nheads, dim, dstate); read once per sequence, written per the write
    /// mode.
    pub state: TensorMut<'a>,
    /// Input: (batch, T, nheads, dim), or (total_tokens, nheads, dim) with `cu_seqlens`.
    pub x: Tensor<'a>,
    /// Time step, shaped like `x`, strides (.., .., 1, 0) (or (.., 1, 0)).
    pub dt: Tensor<'a>,
    /// `A` (nheads, dim, dstate), strides (1, 0, 0), F32.
    pub a: Tensor<'a>,
    /// `B`: (batch, T, ngroups, dstate), or (total_tokens, ngroups, dstate).
    pub b: Tensor<'a>,
    /// `C`, shaped like `B`.
    pub c: Tensor<'a>,
    /// Optional skip weight `D` (nheads, dim), strides (1, 0).
    pub d: Option<Tensor<'a>>,
    /// Optional gate `z`, shaped like `x`.
    pub z: Option<Tensor<'a>>,
    /// Optional `dt_bias` (nheads, dim), strides (1, 0).
    pub dt_bias: Option<Tensor<'a>>,
    /// Optional read slots, I32 or I64: (>= batch,), or (>= batch, W), W >= T, with the column
    /// picked by `num_accepted_tokens` (padded tensors: the first rows and columns are read).
    pub state_batch_indices: Option<Tensor<'a>>,
    /// Optional per-token write slots (>= batch, W), W >= the longest sequence, or (>= batch,)
    /// (every token to one slot); the read index's dtype.
    pub dst_state_batch_indices: Option<Tensor<'a>>,
    /// Optional accepted-token counts (>= batch,), I32 or I64 (its own dtype): pick the column
    /// of a 2-D read index.
    pub num_accepted_tokens: Option<Tensor<'a>>,
    /// Optional sequence offsets (batch + 1,), I32 or I64 (its own dtype): the varlen form (3-D
    /// `x`).
    pub cu_seqlens: Option<Tensor<'a>>,
    /// Optional intermediate state buffer (entries, cache_steps, nheads, dim, dstate),
    /// contiguous, the state's dtype: every token's state goes there (the state is not
    /// written).
    pub intermediate_states_buffer: Option<TensorMut<'a>>,
    /// Optional buffer entry per sequence (batch,), the read index's dtype; read only with the
    /// buffer.
    pub intermediate_state_indices: Option<Tensor<'a>>,
    /// Optional decode scales of an [`DType::I16`](crate::tensor::DType::I16) state (FlashInfer's
    /// block-scaled state), F32 (slots, nheads, dim), as
    /// [`SsuArgs::state_scale`](crate::ssu::SsuArgs::state_scale): the state is read once as
    /// `rn(q * scale)`, carried in fp32 across the tokens, and each written step (a dst slot,
    /// the read slot) is quantised from that step's values, its decode scales at the slot.
    pub state_scale: Option<TensorMut<'a>>,
    /// Optional decode scales of an int16 intermediate buffer, F32 (batch, cache_steps, nheads,
    /// dim) contiguous: required with such a buffer and `state_scale` (step t of entry e at
    /// `[e, t]`; an entry >= batch is not written).
    pub intermediate_state_scales: Option<TensorMut<'a>>,
    /// FlashInfer's `cache_steps`: with a buffer, its size(1); varlen: the most tokens a
    /// sequence may have (T of the call). `None`: the buffer's size(1) where there is one,
    /// else not given (FlashInfer's 0).
    pub cache_steps: Option<usize>,
    /// Output, shaped like `x`, written.
    pub out: TensorMut<'a>,
    /// Slot value that marks a padded sequence or a skipped write (default -1).
    pub pad_slot_id: i64,
    /// Apply softplus to `dt + dt_bias` (default false).
    pub dt_softplus: bool,
    /// FlashInfer's `disable_state_update` (default false): without a buffer or a dst index,
    /// leave the state untouched instead of writing the last token's state.
    pub disable_state_update: bool,
    /// 0 (default): round the state to nearest; any other count (up to `i32::MAX`): stochastic
    /// rounding of an F16 state with that many Philox rounds (needs `seed`).
    pub philox_rounds: u32,
    /// The stochastic-rounding conversion (default [`SrRule::V072`]).
    pub sr_rule: SrRule,
    /// The stochastic-rounding seed; ignored when `philox_rounds == 0`.
    pub seed: Option<SeedSource<'a>>,
}

impl<'a> MtpArgs<'a> {
    /// The required tensors, with defaults: no optional tensor, `cache_steps` from the buffer,
    /// `pad_slot_id = -1`, no softplus, state updated, round to nearest, [`SrRule::V072`].
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
            num_accepted_tokens: None,
            cu_seqlens: None,
            intermediate_states_buffer: None,
            intermediate_state_indices: None,
            state_scale: None,
            intermediate_state_scales: None,
            cache_steps: None,
            out,
            pad_slot_id: -1,
            dt_softplus: false,
            disable_state_update: false,
            philox_rounds: 0,
            sr_rule: SrRule::V072,
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

    /// Sets the read slots ((batch,) or (batch, W)).
    pub fn state_batch_indices(mut self, indices: Tensor<'a>) -> Self {
        self.state_batch_indices = Some(indices);
        self
    }

    /// Sets the per-token write slots ((batch, W)).
    pub fn dst_state_batch_indices(mut self, indices: Tensor<'a>) -> Self {
        self.dst_state_batch_indices = Some(indices);
        self
    }

    /// Sets the accepted-token counts ((batch,)).
    pub fn num_accepted_tokens(mut self, counts: Tensor<'a>) -> Self {
        self.num_accepted_tokens = Some(counts);
        self
    }

    /// Sets the sequence offsets ((batch + 1,)): the varlen form, with a 3-D `x`.
    pub fn cu_seqlens(mut self, offsets: Tensor<'a>) -> Self {
        self.cu_seqlens = Some(offsets);
        self
    }

    /// Sets the decode scales of an I16 state ([`MtpArgs::state_scale`]).
    pub fn state_scale(mut self, scale: TensorMut<'a>) -> Self {
        self.state_scale = Some(scale);
        self
    }

    /// Sets the decode scales of an int16 intermediate buffer
    /// ([`MtpArgs::intermediate_state_scales`]).
    pub fn intermediate_state_scales(mut self, scales: TensorMut<'a>) -> Self {
        self.intermediate_state_scales = Some(scales);
        self
    }

    /// Sets the intermediate state buffer (entries, cache_steps, nheads, dim, dstate).
    pub fn intermediate_states(mut self, buffer: TensorMut<'a>) -> Self {
        self.intermediate_states_buffer = Some(buffer);
        self
    }

    /// Sets the buffer entry of each sequence ((batch,)).
    pub fn intermediate_state_indices(mut self, indices: Tensor<'a>) -> Self {
        self.intermediate_state_indices = Some(indices);
        self
    }

    /// Sets `cache_steps`.
    pub fn cache_steps(mut self, cache_steps: usize) -> Self {
        self.cache_steps = Some(cache_steps);
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

    /// Sets `disable_state_update`.
    pub fn disable_state_update(mut self, on: bool) -> Self {
        self.disable_state_update = on;
        self
    }

    /// Enables stochastic rounding with `philox_rounds` rounds (>= 1; FlashInfer sets no upper
    /// bound) and `seed`.
    pub fn stochastic_rounding(mut self, seed: SeedSource<'a>, philox_rounds: u32) -> Self {
        self.seed = Some(seed);
        self.philox_rounds = philox_rounds;
        self
    }

    /// Sets the stochastic-rounding conversion.
    pub fn sr_rule(mut self, rule: SrRule) -> Self {
        self.sr_rule = rule;
        self
    }

    /// The layouts and flags [`validate_mtp`](super::validate_mtp) checks.
    pub fn spec(&self) -> MtpSpec {
        let lay = |t: &Option<Tensor<'_>>| t.as_ref().map(|t| *t.layout());
        MtpSpec {
            state: *self.state.layout(),
            x: *self.x.layout(),
            dt: *self.dt.layout(),
            a: *self.a.layout(),
            b: *self.b.layout(),
            c: *self.c.layout(),
            d: lay(&self.d),
            z: lay(&self.z),
            dt_bias: lay(&self.dt_bias),
            state_batch_indices: lay(&self.state_batch_indices),
            dst_state_batch_indices: lay(&self.dst_state_batch_indices),
            num_accepted_tokens: lay(&self.num_accepted_tokens),
            cu_seqlens: lay(&self.cu_seqlens),
            intermediate_states_buffer: self
                .intermediate_states_buffer
                .as_ref()
                .map(|t| *t.layout()),
            intermediate_state_indices: lay(&self.intermediate_state_indices),
            state_scale: self.state_scale.as_ref().map(|t| *t.layout()),
            intermediate_state_scales: self.intermediate_state_scales.as_ref().map(|t| *t.layout()),
            cache_steps: self.cache_steps,
            out: *self.out.layout(),
            philox_rounds: self.philox_rounds,
            seed: self.seed.as_ref().map(SeedSource::spec),
        }
    }
}

/// Everything [`validate_mtp`](super::validate_mtp) checks: the layouts of every tensor and
/// the flags that constrain them (no device memory involved). [`MtpArgs::spec`] builds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtpSpec {
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
    /// `num_accepted_tokens`.
    pub num_accepted_tokens: Option<TensorLayout>,
    /// `cu_seqlens`.
    pub cu_seqlens: Option<TensorLayout>,
    /// `intermediate_states_buffer`.
    pub intermediate_states_buffer: Option<TensorLayout>,
    /// `intermediate_state_indices`.
    pub intermediate_state_indices: Option<TensorLayout>,
    /// `state_scale`.
    pub state_scale: Option<TensorLayout>,
    /// `intermediate_state_scales`.
    pub intermediate_state_scales: Option<TensorLayout>,
    /// `cache_steps`, if given.
    pub cache_steps: Option<usize>,
    /// `out`.
    pub out: TensorLayout,
    /// Philox rounds (0: round to nearest).
    pub philox_rounds: u32,
    /// The seed, if any.
    pub seed: Option<SeedSpec>,
}

/// The sizes and dtypes of a validated multi-token call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtpProblem {
    /// Sequences (`x.size(0)`, or `cu_seqlens.size(0) - 1`).
    pub batch: usize,
    /// Most tokens per sequence: T (`x.size(1)`, 1 for a 3-D `x` with `cache_steps`) or,
    /// varlen, `cache_steps`.
    pub ntokens: usize,
    /// Varlen: token rows of `x` (`x.size(0)`); `None` for fixed length.
    pub total_tokens: Option<usize>,
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
    /// Intermediate buffer: `(entries, cache_steps)`, when one is given.
    pub intermediate: Option<(usize, usize)>,
    /// State (and intermediate buffer) dtype.
    pub state_dtype: DType,
    /// Dtype of `x`, `z`, `B`, `C`, `out`.
    pub input_dtype: DType,
    /// Dtype of `dt`, `D`, `dt_bias`.
    pub weight_dtype: DType,
    /// Dtype of the slot indices (`state_batch_indices`, else `dst_state_batch_indices`, else
    /// `intermediate_state_indices`), if any is given, else `cu_seqlens`' (`num_accepted_tokens`
    /// and `cu_seqlens` may each have their own dtype).
    pub index_dtype: Option<DType>,
    /// Whether the state is stochastically rounded (`philox_rounds > 0`).
    pub stochastic_rounding: bool,
}

/// The launch configuration of a multi-token call ([`mtp_launch_plan`](super::mtp_launch_plan)):
/// the C ABI's `mamba_ssu_launch_plan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtpLaunchPlan {
    /// Thread blocks of the grid.
    pub grid_blocks: u64,
    /// Blocks serving one (sequence, head).
    pub blocks_per_head: u64,
    /// Threads per block.
    pub threads_per_block: u32,
    /// Warps per block.
    pub warps_per_block: u32,
    /// State rows (dim) one warp serves.
    pub rows_per_warp: u32,
    /// Whether a compiled-in (hot) kernel serves the call (else the run-time one).
    pub compiled_kernel: bool,
    /// The SM count the plan is for.
    pub num_sms: u32,
}
