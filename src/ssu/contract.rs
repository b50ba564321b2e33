//! The bridge of both forms to the C contract (`mamba_ssu_check`, `mamba_ssu_launch`,
//! `mamba_ssu_plan` of `mamba_ssu.h`): a call's tensors under FlashInfer's names ([`Call`]) become
//! one `mamba_ssu_args` — each tensor's pointer, dtype, shape and strides, an absent one rank 0
//! — and C decides. What stays here is what the C ABI cannot see: that every tensor's largest
//! reachable element lies inside its buffer, that sizes and strides fit its `int64_t`, the
//! devices of the buffers, and the borrows that keep them alive until the launch is enqueued.

use cudarc::driver::{CudaStream, DevicePtr, SyncOnDrop};

use crate::device::check_same_device;
use crate::error::{Error, Result};
use crate::ffi::{self, sys};
use crate::reference::SrRule;
use crate::tensor::{fmt_dims, DType, Tensor, TensorLayout, TensorMut};

use super::args::{num_sms, Algorithm};
use super::seed::{call_seed, SeedSource, SeedSpec};

/// Number of tensor arguments of `mamba_ssu_args` the crate passes.
pub(super) const TENSORS: usize = 18;

/// Their FlashInfer names, in `mamba_ssu_args`' order (the names the C check uses).
pub(super) const NAMES: [&str; TENSORS] = [
    "state",
    "x",
    "dt",
    "A",
    "B",
    "C",
    "D",
    "z",
    "dt_bias",
    "out",
    "state_batch_indices",
    "dst_state_batch_indices",
    "intermediate_states_buffer",
    "intermediate_state_indices",
    "cu_seqlens",
    "num_accepted_tokens",
    "state_scale",
    "intermediate_state_scales",
];

// Positions in `NAMES` (and in `Call::tensors`).
pub(super) const STATE: usize = 0;
pub(super) const X: usize = 1;
pub(super) const DT: usize = 2;
pub(super) const A: usize = 3;
pub(super) const B: usize = 4;
pub(super) const C: usize = 5;
pub(super) const D: usize = 6;
pub(super) const Z: usize = 7;
pub(super) const DT_BIAS: usize = 8;
pub(super) const OUT: usize = 9;
pub(super) const STATE_BATCH_INDICES: usize = 10;
pub(super) const DST_STATE_BATCH_INDICES: usize = 11;
pub(super) const INTERMEDIATE_STATES: usize = 12;
pub(super) const INTERMEDIATE_STATE_INDICES: usize = 13;
pub(super) const CU_SEQLENS: usize = 14;
pub(super) const NUM_ACCEPTED_TOKENS: usize = 15;
pub(super) const STATE_SCALE: usize = 16;
pub(super) const INTERMEDIATE_STATE_SCALES: usize = 17;

/// The index tensors (their dtype is the call's index dtype).
pub(super) const INDEX_TENSORS: [usize; 5] = [
    STATE_BATCH_INDICES,
    DST_STATE_BATCH_INDICES,
    INTERMEDIATE_STATE_INDICES,
    CU_SEQLENS,
    NUM_ACCEPTED_TOKENS,
];

/// The placeholder device address of tensor `k` in the pure check and plan: 256-byte aligned,
/// 16 MiB apart, never dereferenced.
fn placeholder(k: usize) -> u64 {
    0x1000_0000 + 0x100_0000 * k as u64
}

/// The placeholder address of a seed pointer (see [`placeholder`]).
pub(super) const PLACEHOLDER_SEED: u64 = 0x1000_0000 + 0x100_0000 * TENSORS as u64;
/// The placeholder address of a device generator state (see [`placeholder`]).
pub(super) const PLACEHOLDER_GENERATOR: u64 = PLACEHOLDER_SEED + 0x100_0000;

/// `v` as the C ABI's `int64_t`, or an error naming `name`.
pub(super) fn to_i64(name: &'static str, v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| {
        Error::invalid(
            name,
            format!("{v} does not fit in the C ABI's int64 (shape, stride or size)"),
        )
    })
}

/// A size the C check returned (never negative for a checked call).
pub(super) fn size(v: i64) -> usize {
    usize::try_from(v).unwrap_or(0)
}

/// A dtype the C check returned (always one of [`DType`]'s for a checked call).
pub(super) fn dtype(v: i32) -> Result<DType> {
    DType::from_ffi(v).ok_or_else(|| Error::Launcher {
        status: -1,
        message: "the C check described a dtype the Rust API has no variant for".into(),
        detail: format!("dtype {v}"),
    })
}

/// A checked call's problem (`SsuProblem` or `MtpProblem`) from the C check's description `$p`
/// of `$call`: the fields both forms have, then the form's own.
macro_rules! problem {
    ($ty:ident, $p:expr, $call:expr, { $($field:ident: $value:expr),* $(,)? }) => {{
        use $crate::ssu::contract::{dtype, size};
        let p: &$crate::ffi::sys::mamba_ssu_problem = &$p;
        $ty {
            batch: size(p.batch),
            nheads: size(p.nheads),
            dim: size(p.dim),
            dstate: size(p.dstate),
            ngroups: size(p.ngroups),
            cache_slots: size(p.state_cache_size),
            state_dtype: dtype(p.state_dtype)?,
            input_dtype: dtype(p.input_dtype)?,
            weight_dtype: dtype(p.weight_dtype)?,
            index_dtype: if $call.has_indices() {
                Some(dtype(p.index_dtype)?)
            } else {
                None
            },
            stochastic_rounding: p.stochastic_rounding != 0,
            $($field: $value,)*
        }
    }};
}
pub(super) use problem;

/// The descriptor of tensor `name` with layout `l` at device address `data`.
fn descriptor(name: &'static str, l: &TensorLayout, data: u64) -> Result<sys::mamba_ssu_tensor> {
    let mut t = sys::mamba_ssu_tensor {
        data: data as *mut std::ffi::c_void,
        dtype: l.dtype().ffi(),
        rank: l.rank() as i32,
        ..Default::default()
    };
    for (k, (&n, &s)) in l.shape().iter().zip(l.strides()).enumerate() {
        t.shape[k] = to_i64(name, n)?;
        t.strides[k] = to_i64(name, s)?;
    }
    Ok(t)
}

/// The field of `args` that holds tensor `k` of [`NAMES`].
fn field(args: &mut sys::mamba_ssu_args, k: usize) -> &mut sys::mamba_ssu_tensor {
    match k {
        STATE => &mut args.state,
        X => &mut args.x,
        DT => &mut args.dt,
        A => &mut args.A,
        B => &mut args.B,
        C => &mut args.C,
        D => &mut args.D,
        Z => &mut args.z,
        DT_BIAS => &mut args.dt_bias,
        OUT => &mut args.out,
        STATE_BATCH_INDICES => &mut args.state_batch_indices,
        DST_STATE_BATCH_INDICES => &mut args.dst_state_batch_indices,
        INTERMEDIATE_STATES => &mut args.intermediate_states,
        INTERMEDIATE_STATE_INDICES => &mut args.intermediate_state_indices,
        CU_SEQLENS => &mut args.cu_seqlens,
        NUM_ACCEPTED_TOKENS => &mut args.num_accepted_tokens,
        STATE_SCALE => &mut args.state_scale,
        _ => &mut args.intermediate_state_scales,
    }
}

/// One call in FlashInfer's terms, without device memory: the tensors' layouts (absent: None)
/// and the options. [`Call::args`] turns it into the C ABI's `mamba_ssu_args`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Call {
    /// The layouts, in [`NAMES`]' order.
    pub(super) tensors: [Option<TensorLayout>; TENSORS],
    /// `MAMBA_SSU_FORM_SINGLE` or `MAMBA_SSU_FORM_MULTI`: each front door asks for its form.
    pub(super) form: u32,
    /// FlashInfer's `cache_steps` (0: not given).
    pub(super) cache_steps: usize,
    pub(super) algorithm: Algorithm,
    pub(super) pad_slot_id: i64,
    pub(super) dt_softplus: bool,
    pub(super) disable_state_update: bool,
}

impl Call {
    /// A call of `form` over `tensors`, with FlashInfer's default options.
    pub(super) fn new(form: u32, tensors: [Option<TensorLayout>; TENSORS]) -> Self {
        Self {
            tensors,
            form,
            cache_steps: 0,
            algorithm: Algorithm::Auto,
            pad_slot_id: -1,
            dt_softplus: false,
            disable_state_update: false,
        }
    }

    /// Whether any index tensor is given.
    pub(super) fn has_indices(&self) -> bool {
        INDEX_TENSORS.iter().any(|&k| self.tensors[k].is_some())
    }

    /// `mamba_ssu_args` of this call: tensor `k` at device address `data[k]`, the seed, the SM
    /// count (<= 0: the current device's). Sizes and strides that do not fit `int64_t` are an
    /// error naming the tensor.
    pub(super) fn args(
        &self,
        data: &[u64; TENSORS],
        seed: sys::mamba_ssu_seed,
        num_sms: i32,
    ) -> Result<sys::mamba_ssu_args> {
        let mut a = sys::mamba_ssu_args {
            pad_slot_id: self.pad_slot_id,
            cache_steps: to_i64("cache_steps", self.cache_steps)?,
            dt_softplus: i32::from(self.dt_softplus),
            disable_state_update: i32::from(self.disable_state_update),
            algorithm: self.algorithm.ffi(),
            form: self.form as i32,
            num_sms,
            seed,
            ..Default::default()
        };
        for (k, l) in self.tensors.iter().enumerate() {
            if let Some(l) = l {
                *field(&mut a, k) = descriptor(NAMES[k], l, data[k])?;
            }
        }
        Ok(a)
    }

    /// The pure check of this call with its seed (`seed`, `rounds`, `rule`; device addresses
    /// placeholders): the C contract (`mamba_ssu_check`, no device touched), then what only the
    /// Rust layer sees (the buffers, the seed tensor's memory). Returns C's description of the
    /// call.
    pub(super) fn check(
        &self,
        seed: Option<&SeedSpec>,
        rounds: u32,
        rule: SrRule,
    ) -> Result<sys::mamba_ssu_problem> {
        let seed_c = call_seed(seed.map(SeedSpec::ffi), rounds, rule)?;
        let args = self.args(&std::array::from_fn(placeholder), seed_c, 0)?;
        let mut problem = sys::mamba_ssu_problem::default();
        // SAFETY: `args` and `problem` are valid for the call; the check reads the descriptors
        // and pointer values only, never the memory behind them, and touches no device.
        ffi::check(unsafe { sys::mamba_ssu_check(&args, &mut problem) })?;
        self.check_buffers()?;
        if let Some(s) = seed.filter(|_| rounds > 0) {
            s.check_memory()?;
        }
        Ok(problem)
    }

    /// The launch configuration of this call (checked already: [`Call::check`]) with its seed
    /// on `num_sms` (>= 1) multiprocessors (`mamba_ssu_plan`, placeholder addresses, no device
    /// touched).
    pub(super) fn plan(
        &self,
        seed: Option<&SeedSpec>,
        rounds: u32,
        rule: SrRule,
        num_sms: i32,
    ) -> Result<sys::mamba_ssu_launch_plan> {
        let seed = call_seed(seed.map(SeedSpec::ffi), rounds, rule)?;
        let args = self.args(&std::array::from_fn(placeholder), seed, num_sms)?;
        let mut plan = sys::mamba_ssu_launch_plan::default();
        // SAFETY: valid `args` whose pointers are never dereferenced and a valid output; with
        // num_sms > 0 no device is queried.
        ffi::check(unsafe { sys::mamba_ssu_plan(&args, num_sms, &mut plan) })?;
        Ok(plan)
    }

    /// The rule only the Rust layer can check: the largest element each tensor reaches (its
    /// shape and strides) lies inside its buffer. A tensor with no element reaches none.
    pub(super) fn check_buffers(&self) -> Result<()> {
        for (k, l) in self.tensors.iter().enumerate() {
            let Some(l) = l else { continue };
            if l.numel() == Some(0) {
                continue;
            }
            match l.max_offset() {
                Some(m) if m < l.len() => {}
                reach => {
                    return Err(Error::invalid(
                        NAMES[k],
                        format!(
                            "shape {} with strides {} reaches element {}, but the buffer holds {} \
                             elements",
                            fmt_dims(l.shape()),
                            fmt_dims(l.strides()),
                            reach.map_or("past usize::MAX".to_string(), |m| m.to_string()),
                            l.len()
                        ),
                    ))
                }
            }
        }
        Ok(())
    }
}

/// A call's buffers: its read tensors and its written tensors, each with its position in
/// [`NAMES`].
pub(super) struct Buffers<'t, 'a> {
    inputs: Vec<(usize, &'t Tensor<'a>)>,
    outputs: Vec<(usize, &'t mut TensorMut<'a>)>,
}

impl<'t, 'a> Buffers<'t, 'a> {
    /// The buffers of the given tensors (`None`: an absent optional tensor, left out).
    pub(super) fn new<const I: usize, const O: usize>(
        inputs: [(usize, Option<&'t Tensor<'a>>); I],
        outputs: [(usize, Option<&'t mut TensorMut<'a>>); O],
    ) -> Self {
        Self {
            inputs: inputs
                .into_iter()
                .filter_map(|(k, t)| Some((k, t?)))
                .collect(),
            outputs: outputs
                .into_iter()
                .filter_map(|(k, t)| Some((k, t?)))
                .collect(),
        }
    }
}

/// Enqueues `$call` (checked already: [`Call::check`]) for `$args` (an `SsuArgs` or
/// `MtpArgs`) on `$stream` through [`launch`]: the options and seed of `$args`, the buffers of
/// the tensors both forms have (under the field names they share), then the form's own
/// `inputs` and `outputs` (each `(position in NAMES, Option<&tensor>)`).
macro_rules! launch_args {
    ($stream:expr, $call:expr, $args:expr, [$($input:expr),* $(,)?], [$($output:expr),* $(,)?]) => {{
        use $crate::ssu::contract as c;
        let mut call: c::Call = $call;
        call.pad_slot_id = $args.pad_slot_id;
        call.dt_softplus = $args.dt_softplus;
        call.disable_state_update = $args.disable_state_update;
        let buffers = c::Buffers::new(
            [
                (c::X, Some(&$args.x)),
                (c::DT, Some(&$args.dt)),
                (c::A, Some(&$args.a)),
                (c::B, Some(&$args.b)),
                (c::C, Some(&$args.c)),
                (c::D, $args.d.as_ref()),
                (c::Z, $args.z.as_ref()),
                (c::DT_BIAS, $args.dt_bias.as_ref()),
                (c::STATE_BATCH_INDICES, $args.state_batch_indices.as_ref()),
                (c::DST_STATE_BATCH_INDICES, $args.dst_state_batch_indices.as_ref()),
                $($input,)*
            ],
            [
                (c::STATE, Some(&mut $args.state)),
                (c::OUT, Some(&mut $args.out)),
                $($output,)*
            ],
        );
        c::launch(
            $stream,
            &call,
            buffers,
            $args.seed.as_ref(),
            $args.philox_rounds,
            $args.sr_rule,
        )
    }};
}
pub(super) use launch_args;

/// Enqueues `call` (checked already: [`Call::check`]) on `stream` over `buffers` and `seed`
/// with `rounds` and `rule`: checks that every buffer lives on the stream's device, takes the
/// device pointers (their guards live until `mamba_ssu_launch` has returned, which checks the
/// call again with them, pointer alignment included, and enqueues it).
pub(super) fn launch(
    stream: &CudaStream,
    call: &Call,
    buffers: Buffers<'_, '_>,
    seed: Option<&SeedSource<'_>>,
    rounds: u32,
    rule: SrRule,
) -> Result<()> {
    let Buffers {
        inputs,
        mut outputs,
    } = buffers;
    for (k, t) in &outputs {
        check_same_device(NAMES[*k], stream, t.buffer_stream())?;
    }
    for (k, t) in &inputs {
        check_same_device(NAMES[*k], stream, t.buffer_stream())?;
    }
    // The kernel touches a seed's memory with stochastic rounding, and a fused seed's next
    // link whatever the rounds.
    if let Some(s) = seed.filter(|s| rounds > 0 || matches!(s, SeedSource::Fused(_))) {
        s.check_device(stream)?;
    }
    let ctx = stream.context();
    ctx.bind_to_thread()?;
    let sms = i32::try_from(num_sms(ctx)?).unwrap_or(i32::MAX);

    let mut data = [0u64; TENSORS];
    let mut guards: Vec<SyncOnDrop<'_>> = Vec::with_capacity(TENSORS + 1);
    for (k, t) in outputs.iter_mut() {
        let (ptr, guard) = t.device_ptr_mut(stream);
        data[*k] = ptr;
        guards.push(guard);
    }
    for (k, t) in &inputs {
        let (ptr, guard) = t.device_ptr(stream);
        data[*k] = ptr;
        guards.push(guard);
    }
    let memory = match seed {
        Some(SeedSource::Pointer(t)) => Some(t.device_ptr(stream)),
        Some(SeedSource::FromGenerator { state, .. }) => {
            Some(state.device_state().device_ptr(stream))
        }
        _ => None,
    };
    let memory_ptr = memory.as_ref().map_or(0, |(ptr, _)| *ptr);
    let seed = call_seed(seed.map(|s| s.ffi(memory_ptr)), rounds, rule)?;
    let args = call.args(&data, seed, sms)?;
    // SAFETY: every descriptor holds the start of a live device buffer on the stream's device
    // (checked above), borrowed through a guard that is dropped only after this call returns;
    // the caller's check proved that every element the call reaches (shape, strides, dtype)
    // lies inside its buffer, and `mamba_ssu_launch` checks the contract again before it
    // enqueues anything. The seed's memory is a live one-int64 tensor, a live generator state,
    // or the prefetcher's buffers, which the seed's borrow keeps alive. Index values are device
    // data the kernels range-check. `args` outlives the call, which copies it.
    let status = unsafe { sys::mamba_ssu_launch(ffi::stream_handle(stream), &args) };
    drop(memory);
    drop(guards);
    ffi::check(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ssu::fixtures::{base, lay};

    fn call() -> Call {
        super::super::validation::call_of(&base())
    }

    /// `mamba_ssu_args` carries each tensor as it is (address, dtype, rank, shape, strides;
    /// absent ones rank 0) and every option and the seed as given.
    #[test]
    fn args_carry_the_call() {
        let mut c = call();
        c.pad_slot_id = 7;
        c.dt_softplus = true;
        c.disable_state_update = true;
        c.algorithm = Algorithm::Vertical;
        c.cache_steps = 3;
        let data: [u64; TENSORS] = std::array::from_fn(|k| 0x100 * (k as u64 + 1));
        let seed = sys::mamba_ssu_seed {
            mode: sys::MAMBA_SSU_SEED_MODE_POINTER as i32,
            rounds: 5,
            pointer: 0x4000 as *const i64,
            ..Default::default()
        };
        let a = c.args(&data, seed, 78).unwrap();
        let spec = base();
        let dt = a.dt;
        assert_eq!(
            (dt.data as u64, dt.dtype, dt.rank),
            (data[DT], spec.dt.dtype().ffi(), 3)
        );
        assert_eq!(&dt.shape[..3], &[2, 4, 8]);
        assert_eq!(&dt.strides[..3], &[4, 1, 0]);
        assert_eq!(a.state.strides[0], spec.state.strides()[0] as i64);
        assert_eq!(a.A.data as u64, data[A]);
        assert_eq!(
            a.dst_state_batch_indices.data as u64,
            data[DST_STATE_BATCH_INDICES]
        );
        for absent in [
            a.intermediate_states,
            a.intermediate_state_indices,
            a.cu_seqlens,
            a.num_accepted_tokens,
            a.state_scale,
            a.intermediate_state_scales,
        ] {
            assert_eq!(absent.rank, 0);
        }
        assert_eq!(
            (
                a.pad_slot_id,
                a.cache_steps,
                a.dt_softplus,
                a.disable_state_update
            ),
            (7, 3, 1, 1)
        );
        assert_eq!(
            (a.algorithm, a.form, a.num_sms, a.reserved),
            (
                sys::MAMBA_SSU_ALGO_VERTICAL as i32,
                sys::MAMBA_SSU_FORM_SINGLE as i32,
                78,
                0
            )
        );
        assert_eq!(
            (a.seed.mode, a.seed.rounds, a.seed.pointer as u64),
            (1, 5, 0x4000)
        );
        assert!(c.has_indices() && a.state_batch_indices.rank == 1);

        // A size or stride that does not fit int64 names its tensor.
        let mut c = call();
        c.tensors[Z] = Some(lay(DType::BF16, &[1, 4, 8], &[1 << 63, 8, 1]));
        let e = c.args(&data, seed, 0).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { argument: "z", .. }),
            "{e}"
        );
        c.cache_steps = usize::MAX;
        let e = c.args(&data, seed, 0).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    argument: "cache_steps",
                    ..
                }
            ),
            "{e}"
        );
    }

    /// The buffer rule: the largest element a tensor reaches is inside its buffer; a tensor with
    /// no element reaches none; an extent past usize::MAX is reported as such.
    #[test]
    fn every_tensor_stays_inside_its_buffer() {
        let mut c = call();
        c.check_buffers().unwrap();
        c.tensors[OUT] = Some(TensorLayout::new(DType::BF16, &[2, 0, 8], &[32, 8, 1], 0).unwrap());
        c.check_buffers().unwrap();
        c.tensors[D] = Some(TensorLayout::new(DType::BF16, &[4, 8], &[1, 0], 3).unwrap());
        let e = c.check_buffers().unwrap_err().to_string();
        assert!(
            e.starts_with("`D`:") && e.contains("reaches element 3, but the buffer holds 3"),
            "{e}"
        );
        c.tensors[D] = None;
        c.tensors[NUM_ACCEPTED_TOKENS] =
            Some(TensorLayout::new(DType::I32, &[3, 2], &[usize::MAX, 1], 8).unwrap());
        let e = c.check_buffers().unwrap_err().to_string();
        assert!(
            e.starts_with("`num_accepted_tokens`:") && e.contains("past usize::MAX"),
            "{e}"
        );
    }

    /// The placeholders of the pure check and plan are 256-byte aligned and distinct, also from
    /// the seed's and the generator state's (whose seed and offset words are 8-byte aligned).
    #[test]
    fn placeholders_are_aligned_and_distinct() {
        let mut all: Vec<u64> = (0..TENSORS).map(placeholder).collect();
        all.extend([
            PLACEHOLDER_SEED,
            PLACEHOLDER_GENERATOR,
            PLACEHOLDER_GENERATOR + 8,
        ]);
        assert!(all.iter().all(|p| p % 8 == 0));
        assert!(all[..TENSORS + 2].iter().all(|p| p % 256 == 0));
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }
}
