//! The launch: [`selective_state_update`] validates, checks devices and pointer alignment,
//! fills the C ABI's `mamba_ssu_params` (`fill_params`) and enqueues one kernel through
//! `mamba_ssu_selective_state_update`.

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaStream, DevicePtr, SyncOnDrop};

use crate::device::{check_ordinal, check_same_device};
use crate::error::{Error, Result};
use crate::ffi::{self, sys};
use crate::tensor::{DType, Tensor, TensorLayout, VECTOR_ALIGN};

use super::args::{
    num_sms, sr_rule_ffi, Algorithm, SeedSource, SeedSpec, SsuArgs, SsuProblem, SsuSpec,
};
use super::validation::validate;

pub(super) fn to_i64(name: &'static str, v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::invalid(name, format!("{v} does not fit in int64")))
}

/// The argument a C check's detail names (its text up to the first `:`), as a static name.
fn c_argument(detail: &str) -> &'static str {
    const NAMES: [&str; 34] = [
        "batch",
        "nheads",
        "dim",
        "dstate",
        "ngroups",
        "state_cache_size",
        "state_dtype",
        "input_dtype",
        "weight_dtype",
        "index_dtype",
        "algorithm",
        "seed_source",
        "philox_rounds",
        "sr_rule",
        "state",
        "x",
        "dt",
        "A",
        "B",
        "C",
        "out",
        "z",
        "D",
        "dt_bias",
        "seed_next",
        "generator_state",
        "rand_seed",
        "seed_offset",
        "state_batch_indices",
        "dst_state_batch_indices",
        "state_stride_batch",
        "x_stride_batch",
        "out_stride_batch",
        "z_stride_batch",
    ];
    let head = detail.split(':').next().unwrap_or("").trim();
    NAMES
        .iter()
        .find(|n| **n == head)
        .copied()
        .unwrap_or("arguments")
}

/// The C ABI's contract check (`mamba_ssu_selective_state_update_check`) of a call that passed
/// the Rust checks, with placeholder device pointers (aligned, never dereferenced): the one
/// contract both front doors enforce. A violation maps to [`Error::InvalidArgument`] or
/// [`Error::Unsupported`] as the C status says.
pub(super) fn contract_check(spec: &SsuSpec, problem: &SsuProblem) -> Result<()> {
    let mut p = fill_params(spec, problem, -1, true, true, Algorithm::Auto)?;
    let placeholder = |k: usize| (0x1000_0000usize + k * 0x1000) as *mut std::ffi::c_void;
    let opt = |present: bool, k: usize| {
        if present {
            placeholder(k) as *const std::ffi::c_void
        } else {
            std::ptr::null()
        }
    };
    p.state = placeholder(1);
    p.x = placeholder(2);
    p.dt = placeholder(3);
    p.A = placeholder(4) as *const f32;
    p.B = placeholder(5);
    p.C = placeholder(6);
    p.out = placeholder(7);
    p.D = opt(spec.d.is_some(), 8);
    p.z = opt(spec.z.is_some(), 9);
    p.dt_bias = opt(spec.dt_bias.is_some(), 10);
    p.state_batch_indices = opt(spec.state_batch_indices.is_some(), 11);
    p.dst_state_batch_indices = opt(spec.dst_state_batch_indices.is_some(), 12);
    p.rand_seed = placeholder(13) as *const i64;
    p.generator_state = placeholder(14) as *const sys::mamba_ssu_generator_state;
    // SAFETY: the check reads `p` only (pointer values included, never the memory behind them).
    let status = unsafe { sys::mamba_ssu_selective_state_update_check(&p) };
    match ffi::check(status) {
        Ok(()) => Ok(()),
        Err(Error::Launcher { status, detail, .. }) => {
            let argument = c_argument(&detail);
            if status == sys::MAMBA_SSU_ERROR_UNSUPPORTED as i32 {
                Err(Error::unsupported(argument, detail))
            } else {
                Err(Error::invalid(argument, detail))
            }
        }
        Err(e) => Err(e),
    }
}

/// `mamba_ssu_params` of a validated call, every pointer null (filled at launch).
fn fill_params(
    spec: &SsuSpec,
    p: &SsuProblem,
    pad_slot_id: i64,
    dt_softplus: bool,
    update_state: bool,
    algorithm: Algorithm,
) -> Result<sys::mamba_ssu_params> {
    let sr = p.stochastic_rounding;
    let (seed_source, seed_offset, generator_seed) = match spec.seed {
        Some(SeedSpec::FromGenerator { offset }) if sr => {
            (sys::MAMBA_SSU_SEED_FROM_GENERATOR, offset, 0)
        }
        Some(SeedSpec::FromValues { seed, offset }) if sr => {
            (sys::MAMBA_SSU_SEED_FROM_VALUES, offset, seed)
        }
        _ => (sys::MAMBA_SSU_SEED_POINTER, 0, 0),
    };
    let stride0 = |l: &Option<TensorLayout>| l.map_or(0, |l| l.strides()[0]);
    Ok(sys::mamba_ssu_params {
        batch: to_i64("x", p.batch)?,
        nheads: to_i64("state", p.nheads)?,
        dim: to_i64("state", p.dim)?,
        dstate: to_i64("state", p.dstate)?,
        ngroups: to_i64("B", p.ngroups)?,
        state_cache_size: to_i64("state", p.cache_slots)?,
        state_stride_batch: to_i64("state", spec.state.strides()[0])?,
        x_stride_batch: to_i64("x", spec.x.strides()[0])?,
        dt_stride_batch: to_i64("dt", spec.dt.strides()[0])?,
        B_stride_batch: to_i64("B", spec.b.strides()[0])?,
        C_stride_batch: to_i64("C", spec.c.strides()[0])?,
        z_stride_batch: to_i64("z", stride0(&spec.z))?,
        out_stride_batch: to_i64("out", spec.out.strides()[0])?,
        state_batch_indices_stride: to_i64(
            "state_batch_indices",
            stride0(&spec.state_batch_indices),
        )?,
        dst_state_batch_indices_stride: to_i64(
            "dst_state_batch_indices",
            stride0(&spec.dst_state_batch_indices),
        )?,
        pad_slot_id,
        state_dtype: p.state_dtype.ffi(),
        input_dtype: p.input_dtype.ffi(),
        weight_dtype: p.weight_dtype.ffi(),
        index_dtype: p.index_dtype.unwrap_or(DType::I32).ffi(),
        dt_softplus: i32::from(dt_softplus),
        update_state: i32::from(update_state),
        philox_rounds: if sr { spec.philox_rounds as i32 } else { 0 },
        algorithm: algorithm.ffi(),
        seed_source: seed_source as i32,
        seed_offset,
        generator_seed,
        num_sms: 0,
        sr_rule: sr_rule_ffi(p.sr_rule),
        ..Default::default()
    })
}

/// The pointer of an optional tensor's `(pointer, guard)`, 0 when absent.
pub(super) fn raw(p: &Option<(CUdeviceptr, SyncOnDrop<'_>)>) -> CUdeviceptr {
    p.as_ref().map_or(0, |(ptr, _)| *ptr)
}

pub(super) fn check_ptr_alignment(
    name: &'static str,
    ptr: CUdeviceptr,
    align: usize,
) -> Result<()> {
    if ptr % align as u64 != 0 {
        return Err(Error::invalid(
            name,
            format!("expected a {align}-byte aligned start, got address {ptr:#x}"),
        ));
    }
    Ok(())
}

/// Enqueues one selective-state-update on `stream`: validates `args` ([`validate`]), checks
/// that every buffer lives on the stream's device ([`Error::WrongDevice`]) and that the
/// vector-loaded tensors start 16-byte aligned, then launches through the C launcher.
///
/// Asynchronous on `stream`: it returns once the kernel is enqueued; `out` and `state` are
/// written when the kernel runs. Nothing is launched when an error is returned. With
/// [`Algorithm::Auto`] the kernel is picked from the stream device's SM count.
pub fn selective_state_update(stream: &CudaStream, args: &mut SsuArgs<'_>) -> Result<()> {
    let spec = args.spec();
    let problem = validate(&spec)?;

    // Devices.
    check_same_device("state", stream, args.state.buffer_stream())?;
    check_same_device("out", stream, args.out.buffer_stream())?;
    let inputs: [(&'static str, Option<&Tensor<'_>>); 10] = [
        ("x", Some(&args.x)),
        ("dt", Some(&args.dt)),
        ("A", Some(&args.a)),
        ("B", Some(&args.b)),
        ("C", Some(&args.c)),
        ("D", args.d.as_ref()),
        ("z", args.z.as_ref()),
        ("dt_bias", args.dt_bias.as_ref()),
        ("state_batch_indices", args.state_batch_indices.as_ref()),
        (
            "dst_state_batch_indices",
            args.dst_state_batch_indices.as_ref(),
        ),
    ];
    for (name, t) in inputs {
        if let Some(t) = t {
            check_same_device(name, stream, t.buffer_stream())?;
        }
    }
    let sr = problem.stochastic_rounding;
    check_seed_device(stream, args.seed.as_ref(), sr)?;

    let mut params = fill_params(
        &spec,
        &problem,
        args.pad_slot_id,
        args.dt_softplus,
        args.update_state,
        args.algorithm,
    )?;
    let ctx = stream.context();
    ctx.bind_to_thread()?;
    params.num_sms = num_sms(ctx)? as i32;

    // Device pointers; every guard lives until the launcher has returned.
    let (state_ptr, _state_guard) = args.state.device_ptr_mut(stream);
    let (out_ptr, _out_guard) = args.out.device_ptr_mut(stream);
    let (x_ptr, _x_guard) = args.x.device_ptr(stream);
    let (dt_ptr, _dt_guard) = args.dt.device_ptr(stream);
    let (a_ptr, _a_guard) = args.a.device_ptr(stream);
    let (b_ptr, _b_guard) = args.b.device_ptr(stream);
    let (c_ptr, _c_guard) = args.c.device_ptr(stream);
    let d = args.d.as_ref().map(|t| t.device_ptr(stream));
    let z = args.z.as_ref().map(|t| t.device_ptr(stream));
    let dt_bias = args.dt_bias.as_ref().map(|t| t.device_ptr(stream));
    let src_idx = args
        .state_batch_indices
        .as_ref()
        .map(|t| t.device_ptr(stream));
    let dst_idx = args
        .dst_state_batch_indices
        .as_ref()
        .map(|t| t.device_ptr(stream));
    let seed = match (&args.seed, sr) {
        (Some(SeedSource::Pointer(t)), true) => Some(t.device_ptr(stream)),
        (Some(SeedSource::FromGenerator { state, .. }), true) => {
            Some(state.device_state().device_ptr(stream))
        }
        _ => None,
    };

    for (name, ptr) in [
        ("state", state_ptr),
        ("out", out_ptr),
        ("x", x_ptr),
        ("B", b_ptr),
        ("C", c_ptr),
        ("z", raw(&z)),
    ] {
        check_ptr_alignment(name, ptr, VECTOR_ALIGN)?;
    }

    params.state = state_ptr as *mut std::ffi::c_void;
    params.out = out_ptr as *mut std::ffi::c_void;
    params.x = x_ptr as *const std::ffi::c_void;
    params.dt = dt_ptr as *const std::ffi::c_void;
    params.A = a_ptr as *const f32;
    params.B = b_ptr as *const std::ffi::c_void;
    params.C = c_ptr as *const std::ffi::c_void;
    params.D = raw(&d) as *const std::ffi::c_void;
    params.z = raw(&z) as *const std::ffi::c_void;
    params.dt_bias = raw(&dt_bias) as *const std::ffi::c_void;
    params.state_batch_indices = raw(&src_idx) as *const std::ffi::c_void;
    params.dst_state_batch_indices = raw(&dst_idx) as *const std::ffi::c_void;
    set_seed_fields!(params, seed_fields(args.seed.as_ref(), raw(&seed), sr));

    // SAFETY: every pointer in `params` is null (an absent optional tensor) or the start of a
    // live device buffer on the stream's device (checked above), held by a guard that is
    // dropped only after this call returns; `validate` proved that every element the kernel
    // can address (shape, strides, dtype) lies inside its buffer and that the layouts are
    // the launcher's contract. Index values are device data the kernel range-checks (an
    // out-of-range slot is treated as a pad). `params` outlives the call, which copies it.
    let status =
        unsafe { sys::mamba_ssu_selective_state_update(ffi::stream_handle(stream), &params) };
    ffi::check(status)
}

/// Sets the seed fields of a C parameter block (`mamba_ssu_params` or `mamba_ssu_mtp_params`,
/// whose seed fields have the same names and meaning) from a [`SeedFields`]; fields it leaves as
/// `None` keep the value the block was filled with.
macro_rules! set_seed_fields {
    ($params:expr, $fields:expr) => {{
        let f: $crate::ssu::launch::SeedFields = $fields;
        if let Some(v) = f.generator_state {
            $params.generator_state = v;
        }
        if let Some(v) = f.rand_seed {
            $params.rand_seed = v;
        }
        if let Some((seed, offset)) = f.position {
            $params.generator_seed = seed;
            $params.seed_offset = offset;
        }
        if let Some(v) = f.seed_next {
            $params.seed_next = v;
        }
    }};
}
pub(crate) use set_seed_fields;

/// The device checks of a call's seed (shared by the single- and multi-token launches): its
/// device memory, if any, on the stream's device; a device generator state noted as used on
/// `stream`. Only with stochastic rounding (`sr`); a missing seed was rejected by validation.
pub(super) fn check_seed_device(
    stream: &CudaStream,
    seed: Option<&SeedSource<'_>>,
    sr: bool,
) -> Result<()> {
    if !sr {
        return Ok(());
    }
    match seed {
        Some(SeedSource::Pointer(t)) => check_same_device("rand_seed", stream, t.buffer_stream()),
        Some(SeedSource::FromGenerator { state, .. }) => {
            check_same_device("generator_state", stream, state.device_state().stream())?;
            state.note_use(stream)
        }
        Some(SeedSource::Prefetched(p)) => check_ordinal("rand_seed", stream, p.ordinal()),
        Some(SeedSource::Fused(f)) => check_ordinal("generator_state", stream, f.ordinal()),
        Some(SeedSource::FromValues { .. }) | None => Ok(()),
    }
}

/// The seed fields a call sets in its C parameter block (`None`: left as filled from the
/// spec), the same for `mamba_ssu_params` and `mamba_ssu_mtp_params`.
pub(super) struct SeedFields {
    pub(super) rand_seed: Option<*const i64>,
    pub(super) generator_state: Option<*const sys::mamba_ssu_generator_state>,
    /// (generator_seed, seed_offset): the draw position of a fused seed.
    pub(super) position: Option<(u64, u64)>,
    pub(super) seed_next: Option<*mut i64>,
}

/// The seed fields of `seed`, whose device memory (a `Pointer` tensor or a `FromGenerator`
/// state) is at `seed_ptr` (0 for the other sources). With a fused seed the draw position is
/// set even without stochastic rounding in this call (`sr`): the next call of a chain derives
/// its link from it.
pub(super) fn seed_fields(
    seed: Option<&SeedSource<'_>>,
    seed_ptr: CUdeviceptr,
    sr: bool,
) -> SeedFields {
    let mut f = SeedFields {
        rand_seed: None,
        generator_state: None,
        position: None,
        seed_next: None,
    };
    match seed {
        Some(SeedSource::FromGenerator { .. }) if sr => {
            f.generator_state = Some(seed_ptr as *const sys::mamba_ssu_generator_state);
        }
        Some(SeedSource::Pointer(_)) if sr => f.rand_seed = Some(seed_ptr as *const i64),
        Some(SeedSource::Prefetched(p)) if sr => f.rand_seed = Some(p.device_ptr() as *const i64),
        Some(SeedSource::Fused(fused)) => {
            f.generator_state = fused
                .generator_state()
                .map(|state| state as *const sys::mamba_ssu_generator_state);
            f.position = Some((fused.generator_seed(), fused.seed_offset()));
            f.rand_seed = fused
                .linked_seed()
                .filter(|_| sr)
                .map(|link| link as *const i64);
            f.seed_next = fused.seed_next().map(|next| next as *mut i64);
        }
        _ => {}
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::SrRule;
    use crate::ssu::fixtures::*;

    /// Fake device addresses, 256-byte aligned, one per tensor.
    fn with_fake_pointers(mut p: sys::mamba_ssu_params, spec: &SsuSpec) -> sys::mamba_ssu_params {
        let mut next = 0x1000_0000usize;
        let mut addr = || {
            next += 0x10_0000;
            next as *mut std::ffi::c_void
        };
        p.state = addr();
        p.out = addr();
        p.x = addr();
        p.dt = addr();
        p.A = addr() as *const f32;
        p.B = addr();
        p.C = addr();
        let mut opt = |l: &Option<TensorLayout>| {
            if l.is_some() {
                addr() as *const std::ffi::c_void
            } else {
                std::ptr::null()
            }
        };
        p.D = opt(&spec.d);
        p.z = opt(&spec.z);
        p.dt_bias = opt(&spec.dt_bias);
        p.state_batch_indices = opt(&spec.state_batch_indices);
        p.dst_state_batch_indices = opt(&spec.dst_state_batch_indices);
        p.rand_seed = addr() as *const i64;
        p.generator_state = addr() as *const sys::mamba_ssu_generator_state;
        p.num_sms = 132;
        p
    }

    /// Raw parameters of a problem that the C check accepts whenever its sizes and dtypes do:
    /// aligned fake pointers (nothing is launched), 16-byte batch strides.
    #[allow(clippy::too_many_arguments)]
    fn raw_params(
        batch: usize,
        nheads: usize,
        dim: usize,
        dstate: usize,
        dtypes: [i32; 3],
        rounds: i32,
        algorithm: i32,
        z: bool,
        index: Option<i32>,
        seed_next: bool,
        num_sms: i32,
    ) -> sys::mamba_ssu_params {
        let fake = |k: usize| (0x1000_0000usize + k * 0x100_0000) as *mut std::ffi::c_void;
        let round8 = |v: usize| v.div_ceil(8) * 8;
        let row = round8(nheads * dim) as i64;
        let index_ptr = |k| {
            if index.is_some() {
                fake(k) as *const _
            } else {
                std::ptr::null()
            }
        };
        sys::mamba_ssu_params {
            batch: batch as i64,
            nheads: nheads as i64,
            dim: dim as i64,
            dstate: dstate as i64,
            ngroups: 1,
            state_cache_size: batch as i64 + 1,
            state_stride_batch: (nheads * dim * dstate) as i64,
            x_stride_batch: row,
            dt_stride_batch: nheads as i64,
            B_stride_batch: dstate as i64,
            C_stride_batch: dstate as i64,
            z_stride_batch: if z { row } else { 0 },
            out_stride_batch: row,
            state_batch_indices_stride: 1,
            dst_state_batch_indices_stride: 1,
            pad_slot_id: -1,
            state: fake(1),
            x: fake(2),
            dt: fake(3),
            dt_bias: fake(4),
            A: fake(5) as *const f32,
            B: fake(6),
            C: fake(7),
            D: fake(8),
            z: if z { fake(9) } else { std::ptr::null() },
            out: fake(10),
            state_batch_indices: index_ptr(11),
            dst_state_batch_indices: std::ptr::null(),
            rand_seed: fake(12) as *const i64,
            seed_next: if seed_next {
                fake(13) as *mut i64
            } else {
                std::ptr::null_mut()
            },
            state_dtype: dtypes[0],
            input_dtype: dtypes[1],
            weight_dtype: dtypes[2],
            index_dtype: index.unwrap_or(sys::MAMBA_SSU_I32 as i32),
            dt_softplus: 1,
            update_state: 1,
            philox_rounds: rounds,
            algorithm,
            seed_source: sys::MAMBA_SSU_SEED_POINTER as i32,
            num_sms,
            ..Default::default()
        }
    }

    /// Every problem the C check accepts gets a valid launch configuration (no division by
    /// zero, no empty or oversized grid, every row of a head covered), over a dense grid of
    /// shapes — dim 1..=256, nheads up to 8192, batch up to 512 — with every dtype, dstate,
    /// round count, algorithm, z, index and fused-chain combination, on three SM counts.
    /// Among them the shapes that once crashed the host (dim 8 × 1024 heads × batch 4, dim 4 ×
    /// 512 × 64, dim 1 × batch 2): the grid rule divided by zero there.
    #[test]
    fn every_accepted_problem_has_a_valid_launch_plan() {
        let f = [sys::MAMBA_SSU_F32, sys::MAMBA_SSU_F16, sys::MAMBA_SSU_BF16].map(|v| v as i32);
        let hot = [sys::MAMBA_SSU_F16, sys::MAMBA_SSU_BF16, sys::MAMBA_SSU_BF16].map(|v| v as i32);
        let algos = [0, 1, 2];
        let heads = [1usize, 2, 3, 8, 32, 128, 512, 1024, 8192];
        let batches = [1usize, 2, 4, 7, 64, 256, 512];
        let (mut accepted, mut k) = (0usize, 0usize);
        for dim in 1..=256usize {
            for &nheads in &heads {
                for &batch in &batches {
                    let mut cases = Vec::new();
                    for rounds in [0, 5, 10] {
                        for algo in algos {
                            cases.push((128, hot, rounds, algo, k % 2 == 0, None, k % 5 == 0));
                        }
                    }
                    // One generic combination per shape, cycling through all of them.
                    let dtypes = [f[k % 3], f[(k / 3) % 3], f[(k / 9) % 3]];
                    let dstate = [64, 128, 256][(k / 27) % 3];
                    let rounds = if dtypes[0] == f[1] {
                        [0, 1, 5, 10][(k / 81) % 4]
                    } else {
                        0
                    };
                    let index = [
                        None,
                        Some(sys::MAMBA_SSU_I32 as i32),
                        Some(sys::MAMBA_SSU_I64 as i32),
                    ][(k / 7) % 3];
                    cases.push((
                        dstate,
                        dtypes,
                        rounds,
                        algos[k % 3],
                        k % 2 == 1,
                        index,
                        k % 3 == 0,
                    ));
                    let sms = [132, 1, 78][k % 3];
                    k += 1;
                    for (dstate, dtypes, rounds, algo, z, index, next) in cases {
                        let p = raw_params(
                            batch, nheads, dim, dstate, dtypes, rounds, algo, z, index, next, sms,
                        );
                        // SAFETY: a valid parameter block whose pointers are never dereferenced.
                        if unsafe { sys::mamba_ssu_selective_state_update_check(&p) } != 0 {
                            continue;
                        }
                        accepted += 1;
                        let mut plan = sys::mamba_ssu_launch_plan::default();
                        // SAFETY: valid params and output pointers; the plan touches no device.
                        let st = unsafe {
                            sys::mamba_ssu_selective_state_update_plan(&p, sms, &mut plan)
                        };
                        let what = format!("b={batch} h={nheads} dim={dim} dstate={dstate} {dtypes:?} R={rounds} alg={algo} z={z} next={next} sms={sms}");
                        assert_eq!(st, 0, "{what}: {:?}", ffi::check(st));
                        assert!(
                            (1..=i64::from(i32::MAX)).contains(&plan.grid_blocks),
                            "{what}: {plan:?}"
                        );
                        assert!(
                            plan.threads_per_block >= 32 && plan.threads_per_block <= 1024,
                            "{what}: {plan:?}"
                        );
                        assert_eq!(plan.threads_per_block, 32 * plan.warps_per_block, "{what}");
                        assert!(
                            plan.rows_per_warp >= 1 && plan.blocks_per_head >= 1,
                            "{what}: {plan:?}"
                        );
                        let covered = i64::from(plan.warps_per_block)
                            * i64::from(plan.rows_per_warp)
                            * plan.blocks_per_head;
                        assert!(
                            covered >= dim as i64,
                            "{what}: {plan:?} covers {covered} rows"
                        );
                        assert!(
                            plan.grid_blocks >= (batch * nheads) as i64,
                            "{what}: {plan:?}"
                        );
                        assert_eq!(plan.num_sms, sms, "{what}");
                    }
                }
            }
        }
        assert!(
            accepted > 100_000,
            "only {accepted} accepted problems: the grid lost its coverage"
        );
    }

    /// FlashInfer 0.7.4's SR conversion runs the generic kernel (the hot kernels implement
    /// 0.7.2's) and the plan reports it; without SR the rule changes nothing; a raw rule outside
    /// the enumeration is an invalid argument naming `sr_rule`, with or without SR.
    #[test]
    fn the_v074_rule_runs_the_generic_kernel_and_the_plan_says_so() {
        let hot = [sys::MAMBA_SSU_F16, sys::MAMBA_SSU_BF16, sys::MAMBA_SSU_BF16].map(|v| v as i32);
        let (v072, v074) = (sys::MAMBA_SSU_SR_V072 as i32, sys::MAMBA_SSU_SR_V074 as i32);
        for rounds in [0, 5, 10] {
            for algo in [0, 1, 2] {
                for (batch, nheads, z) in [(1, 32, false), (4, 32, true), (256, 128, false)] {
                    for rule in [v072, v074] {
                        let mut p = raw_params(
                            batch, nheads, 64, 128, hot, rounds, algo, z, None, false, 132,
                        );
                        p.sr_rule = rule;
                        let mut plan = sys::mamba_ssu_launch_plan::default();
                        // SAFETY: valid params and output pointers; the plan touches no device.
                        let st = unsafe {
                            sys::mamba_ssu_selective_state_update_plan(&p, 132, &mut plan)
                        };
                        assert_eq!(st, 0, "{:?}", ffi::check(st));
                        let generic = rounds > 0 && rule == v074;
                        assert_eq!(
                            plan.compiled_kernel,
                            i32::from(!generic),
                            "R={rounds} alg={algo} b={batch} h={nheads} rule={rule}"
                        );
                        // The layout is resolved the same way for both rules.
                        let mut other = p;
                        other.sr_rule = v072;
                        let mut plan072 = sys::mamba_ssu_launch_plan::default();
                        // SAFETY: as above.
                        let st = unsafe {
                            sys::mamba_ssu_selective_state_update_plan(&other, 132, &mut plan072)
                        };
                        assert_eq!(st, 0);
                        assert_eq!(plan.algorithm, plan072.algorithm);
                    }
                }
            }
        }
        for rounds in [0, 10] {
            for bad in [2, -1, i32::MAX] {
                let mut p = raw_params(1, 32, 64, 128, hot, rounds, 0, false, None, false, 132);
                p.sr_rule = bad;
                // SAFETY: the check reads `p` only.
                let st = unsafe { sys::mamba_ssu_selective_state_update_check(&p) };
                assert_eq!(st, sys::MAMBA_SSU_ERROR_INVALID_ARGUMENT as i32);
                let e = ffi::check(st).unwrap_err().to_string();
                assert!(e.contains("sr_rule"), "{e}");
            }
        }
    }

    /// A small deterministic generator for the property test.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn pick<T: Copy>(&mut self, v: &[T]) -> T {
            v[(self.next() % v.len() as u64) as usize]
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.next() % 100 < percent
        }
    }

    /// A layout over an exactly long enough buffer, or None where its extent overflows usize.
    fn try_lay(dtype: DType, shape: &[usize], strides: &[usize]) -> Option<TensorLayout> {
        let mut max = 0usize;
        for (n, s) in shape.iter().zip(strides) {
            max = max.checked_add(n.checked_sub(1)?.checked_mul(*s)?)?;
        }
        TensorLayout::new(dtype, shape, strides, max.checked_add(1)?).ok()
    }

    /// The C parameter block that carries `spec` (no validation: what the C ABI receives when a
    /// caller passes the same sizes, dtypes, strides and flags), with placeholder pointers.
    fn spec_params(spec: &SsuSpec) -> sys::mamba_ssu_params {
        let ph = |k: usize| (0x1000_0000usize + k * 0x1000) as *mut std::ffi::c_void;
        let opt = |l: &Option<TensorLayout>, k| {
            if l.is_some() {
                ph(k) as *const std::ffi::c_void
            } else {
                std::ptr::null()
            }
        };
        let s0 = |l: &Option<TensorLayout>| l.map_or(0, |l| l.strides()[0] as i64);
        let sr = spec.philox_rounds > 0;
        let (seed_source, seed_offset, generator_seed) = match spec.seed {
            Some(SeedSpec::FromGenerator { offset }) if sr => {
                (sys::MAMBA_SSU_SEED_FROM_GENERATOR, offset, 0)
            }
            Some(SeedSpec::FromValues { seed, offset }) if sr => {
                (sys::MAMBA_SSU_SEED_FROM_VALUES, offset, seed)
            }
            _ => (sys::MAMBA_SSU_SEED_POINTER, 0, 0),
        };
        let index_dtype = spec
            .state_batch_indices
            .or(spec.dst_state_batch_indices)
            .map_or(DType::I32, |l| l.dtype());
        sys::mamba_ssu_params {
            batch: spec.x.shape()[0] as i64,
            nheads: spec.state.shape()[1] as i64,
            dim: spec.state.shape()[2] as i64,
            dstate: spec.state.shape()[3] as i64,
            ngroups: spec.b.shape()[1] as i64,
            state_cache_size: spec.state.shape()[0] as i64,
            state_stride_batch: spec.state.strides()[0] as i64,
            x_stride_batch: spec.x.strides()[0] as i64,
            dt_stride_batch: spec.dt.strides()[0] as i64,
            B_stride_batch: spec.b.strides()[0] as i64,
            C_stride_batch: spec.c.strides()[0] as i64,
            z_stride_batch: s0(&spec.z),
            out_stride_batch: spec.out.strides()[0] as i64,
            state_batch_indices_stride: s0(&spec.state_batch_indices),
            dst_state_batch_indices_stride: s0(&spec.dst_state_batch_indices),
            pad_slot_id: -1,
            state: ph(1),
            x: ph(2),
            dt: ph(3),
            A: ph(4) as *const f32,
            B: ph(5),
            C: ph(6),
            out: ph(7),
            D: opt(&spec.d, 8),
            z: opt(&spec.z, 9),
            dt_bias: opt(&spec.dt_bias, 10),
            state_batch_indices: opt(&spec.state_batch_indices, 11),
            dst_state_batch_indices: opt(&spec.dst_state_batch_indices, 12),
            rand_seed: match spec.seed {
                Some(SeedSpec::Pointer(_)) => ph(13) as *const i64,
                _ => std::ptr::null(),
            },
            generator_state: match spec.seed {
                Some(SeedSpec::FromGenerator { .. }) => {
                    ph(14) as *const sys::mamba_ssu_generator_state
                }
                _ => std::ptr::null(),
            },
            state_dtype: spec.state.dtype().ffi(),
            input_dtype: spec.x.dtype().ffi(),
            weight_dtype: spec.dt.dtype().ffi(),
            index_dtype: index_dtype.ffi(),
            dt_softplus: 1,
            update_state: 1,
            philox_rounds: spec.philox_rounds as i32,
            algorithm: 0,
            seed_source: seed_source as i32,
            seed_offset,
            generator_seed,
            num_sms: 132,
            sr_rule: sr_rule_ffi(spec.sr_rule),
            ..Default::default()
        }
    }

    /// A random valid call the C parameter block can express (every tensor's shape follows
    /// from the common sizes, inner strides canonical), then at most one mutation of a field
    /// the block carries: a size to a limit or an overflowing value, a batch stride, a dtype,
    /// an optional tensor, an index, the rounds or the seed. The SR rule is either of the two
    /// (the property test also sets raw values outside the enumeration in the C block).
    fn random_spec(rng: &mut Rng) -> Option<SsuSpec> {
        let f = [DType::F16, DType::BF16, DType::F32];
        let mut batch = rng.pick(&[1usize, 2, 3, 5, 64, 512]);
        let mut nheads = rng.pick(&[1usize, 2, 4, 6, 64, 8192]);
        let mut dim = rng.pick(&[1usize, 2, 7, 8, 64, 100]);
        let mut dstate = rng.pick(&[64usize, 128, 256]);
        let mut ngroups = rng.pick(&[1usize, 2]).min(nheads);
        if nheads % ngroups != 0 {
            ngroups = 1;
        }
        let mut rounds = rng.pick(&[0u32, 5, 10]);
        let sr_rule = rng.pick(&[SrRule::V072, SrRule::V074]);
        let mut state_dtype = if rounds > 0 { DType::F16 } else { rng.pick(&f) };
        let mut input = rng.pick(&f);
        let mut weight = rng.pick(&f);
        let mut idx_dtype = rng.pick(&[DType::I32, DType::I64]);
        let mut dst_dtype = idx_dtype;
        let mut width = rng.pick(&[1usize, 4]);
        let (mut with_sbi, mut with_dsbi) = (rng.chance(70), rng.chance(50));
        let mut slots = batch + rng.pick(&[0usize, 1, 7]);
        let mut seed = match rng.next() % 3 {
            0 => Some(SeedSpec::FromGenerator {
                offset: 4 * (rng.next() % 1000),
            }),
            1 => Some(SeedSpec::FromValues {
                seed: rng.next(),
                offset: 8,
            }),
            _ => Some(SeedSpec::Pointer(try_lay(DType::I64, &[1], &[1])?)),
        };
        let (mut with_d, mut with_z, mut with_bias) =
            (rng.chance(70), rng.chance(50), rng.chance(70));
        // One mutation (or none, one case in eight).
        let mutation = rng.next() % 24;
        match mutation {
            0 => batch = rng.pick(&[1 << 20, (1 << 31) - 1, 1 << 31, 1 << 40]),
            1 => nheads = rng.pick(&[1 << 20, 1 << 31, 3 << 30]),
            2 => dim = rng.pick(&[1 << 20, 1 << 30, (1 << 30) + 1, 1 << 40]),
            3 => dstate = rng.pick(&[0, 16, 32, 96, 512]),
            4 => ngroups = rng.pick(&[3, nheads + 1, 0]),
            5 => slots = rng.pick(&[batch - 1, 0, 1 << 40]),
            6 => state_dtype = rng.pick(&[DType::I32, DType::I64, DType::BF16, DType::F32]),
            7 => input = rng.pick(&[DType::I32, DType::I64]),
            8 => weight = rng.pick(&[DType::I32, DType::I64]),
            9 => idx_dtype = rng.pick(&[DType::F32, DType::F16, DType::I64]),
            10 => dst_dtype = rng.pick(&[DType::F32, DType::I32, DType::I64]),
            11 => rounds = rng.pick(&[1, 2, 9, 11, 64]),
            12 => {
                seed = rng.pick(&[
                    None,
                    Some(SeedSpec::FromGenerator { offset: 6 }),
                    Some(SeedSpec::FromValues { seed: 1, offset: 2 }),
                ])
            }
            13 => {
                (with_sbi, with_dsbi, slots) =
                    (false, rng.chance(50), batch.saturating_sub(1).max(1))
            }
            14 => width = rng.pick(&[2, 16]),
            15 => (with_d, with_z, with_bias) = (rng.chance(50), rng.chance(50), rng.chance(50)),
            _ => {}
        }
        let bytes = |d: DType| match d {
            DType::F32 | DType::I32 => 4,
            DType::I64 => 8,
            _ => 2,
        };
        let align = |d: DType| 16 / bytes(d);
        let up = |v: usize, a: usize| v.div_ceil(a).checked_mul(a);
        let head = dim.checked_mul(dstate)?;
        let slot = up(nheads.checked_mul(head)?, align(state_dtype))?;
        let row = nheads.checked_mul(dim)?;
        let xrow = up(row, align(input))?;
        let bcrow = up(ngroups.checked_mul(dstate)?, align(input))?;
        let (mut xs, mut os, mut zs, mut bs, mut cs, mut dts, mut ss) = (
            xrow,
            xrow,
            xrow,
            bcrow,
            bcrow,
            nheads,
            slot + 64 * rng.pick(&[0usize, 1]),
        );
        match mutation {
            16 => xs = rng.pick(&[0, xrow + 1, 1 << 62]),
            17 => os = rng.pick(&[0, xrow.saturating_sub(align(input)), xrow + 1]),
            18 => zs = rng.pick(&[0, xrow + 1]),
            19 => bs = rng.pick(&[0, bcrow + 1, 1 << 62]),
            20 => cs = rng.pick(&[0, bcrow + 1]),
            21 => dts = rng.pick(&[0, 1 << 62]),
            22 => ss = rng.pick(&[slot.saturating_sub(1), slot + 1, 1 << 62]),
            _ => {}
        }
        let index = |d: DType| -> Option<TensorLayout> {
            if width == 1 {
                try_lay(d, &[batch], &[1])
            } else {
                try_lay(d, &[batch, width], &[width, 1])
            }
        };
        Some(SsuSpec {
            state: try_lay(
                state_dtype,
                &[slots, nheads, dim, dstate],
                &[ss, head, dstate, 1],
            )?,
            x: try_lay(input, &[batch, nheads, dim], &[xs, dim, 1])?,
            dt: try_lay(weight, &[batch, nheads, dim], &[dts, 1, 0])?,
            a: try_lay(DType::F32, &[nheads, dim, dstate], &[1, 0, 0])?,
            b: try_lay(input, &[batch, ngroups, dstate], &[bs, dstate, 1])?,
            c: try_lay(input, &[batch, ngroups, dstate], &[cs, dstate, 1])?,
            d: if with_d {
                Some(try_lay(weight, &[nheads, dim], &[1, 0])?)
            } else {
                None
            },
            z: if with_z {
                Some(try_lay(input, &[batch, nheads, dim], &[zs, dim, 1])?)
            } else {
                None
            },
            dt_bias: if with_bias {
                Some(try_lay(weight, &[nheads, dim], &[1, 0])?)
            } else {
                None
            },
            state_batch_indices: if with_sbi {
                Some(index(idx_dtype)?)
            } else {
                None
            },
            dst_state_batch_indices: if with_dsbi {
                Some(index(dst_dtype)?)
            } else {
                None
            },
            out: try_lay(input, &[batch, nheads, dim], &[os, dim, 1])?,
            philox_rounds: rounds,
            sr_rule,
            seed,
        })
    }

    /// One contract behind both front doors: for random calls both can express — valid ones
    /// and ones mutated in every field the C block carries, with sizes near the limits and
    /// overflowing products — Rust's `validate` and the C ABI's check accept exactly the same
    /// calls, and reject the others with the same kind of error (invalid vs unsupported).
    #[test]
    fn rust_validate_and_the_c_check_accept_the_same_calls() {
        let mut rng = Rng(0x00C0_47AC_7000);
        let (mut cases, mut accepted, mut kinds) = (0, 0, std::collections::BTreeMap::new());
        let mut raw_rules = 0usize;
        let mut mismatches: Vec<String> = Vec::new();
        while cases < 20_000 {
            let Some(spec) = random_spec(&mut rng) else {
                continue;
            };
            // The C block has one index dtype: two different ones are a Rust-only call.
            if let (Some(a), Some(b)) = (spec.state_batch_indices, spec.dst_state_batch_indices) {
                if a.dtype() != b.dtype() {
                    continue;
                }
            }
            cases += 1;
            let rust = match validate(&spec) {
                Ok(_) => 0,
                Err(Error::InvalidArgument { .. }) => 1,
                Err(Error::Unsupported { .. }) => 2,
                Err(e) => panic!("unexpected error kind {e:?}"),
            };
            let mut p = spec_params(&spec);
            // A raw sr_rule outside the enumeration, which no `SrRule` holds (the Rust API
            // cannot express it): on a call Rust accepts, the C check must reject it as an
            // invalid argument naming `sr_rule`.
            let raw_rule = rust == 0 && rng.chance(5);
            if raw_rule {
                p.sr_rule = rng.pick(&[2, 3, -1, i32::MAX, i32::MIN]);
            }
            let expected = if raw_rule { 1 } else { rust };
            // SAFETY: the check reads `p` only (never the memory behind its pointers).
            let c = unsafe { sys::mamba_ssu_selective_state_update_check(&p) };
            let detail = ffi::check(c).err().map(|e| e.to_string());
            if expected != c {
                let r = validate(&spec).err().map(|e| e.to_string());
                mismatches.push(format!(
                    "Rust {r:?} (raw sr_rule {raw_rule}) vs C {detail:?}"
                ));
            } else if raw_rule {
                raw_rules += 1;
                let d = detail.unwrap_or_default();
                if !d.contains("sr_rule") {
                    mismatches.push(format!("raw sr_rule {} vs C {d:?}", p.sr_rule));
                }
            }
            accepted += usize::from(rust == 0);
            *kinds.entry(rust).or_insert(0usize) += 1;
        }
        mismatches.sort();
        mismatches.dedup_by(|a, b| a.split(" vs ").next() == b.split(" vs ").next());
        assert!(
            mismatches.is_empty(),
            "{} kinds of disagreement:\n{}",
            mismatches.len(),
            mismatches.join("\n")
        );
        assert!(accepted > 1_000 && kinds.len() == 3, "coverage: {kinds:?}");
        assert!(raw_rules > 20, "coverage: {raw_rules} raw sr_rule values");
    }

    #[test]
    fn launcher_check_accepts_what_validate_accepts() {
        let specs = [
            base(),
            with(|s| {
                s.d = None;
                s.z = None;
                s.dt_bias = None;
                s.state_batch_indices = None;
                s.dst_state_batch_indices = None;
                s.philox_rounds = 0;
            }),
            with(|s| {
                s.state_batch_indices = Some(lay(DType::I64, &[BATCH, 4], &[4, 1]));
                s.dst_state_batch_indices = Some(lay(DType::I64, &[BATCH, 4], &[4, 1]));
                s.seed = Some(SeedSpec::FromGenerator { offset: 12 });
                s.philox_rounds = 5;
            }),
            with(|s| {
                s.state.dtype = DType::F32;
                s.philox_rounds = 0;
                s.x.strides[0] = 0;
            }),
            with(|s| {
                s.seed = Some(SeedSpec::FromValues {
                    seed: u64::MAX,
                    offset: 1 << 40,
                })
            }),
        ];
        for spec in specs {
            let problem = validate(&spec).unwrap();
            for algorithm in [Algorithm::Auto, Algorithm::Simple, Algorithm::Vertical] {
                let p = fill_params(&spec, &problem, 0, true, true, algorithm).unwrap();
                let p = with_fake_pointers(p, &spec);
                // SAFETY: the check only reads `p` (pointer values included, never the memory
                // they point to).
                let status = unsafe { sys::mamba_ssu_selective_state_update_check(&p) };
                assert_eq!(
                    ffi::check(status).map_err(|e| e.to_string()),
                    Ok(()),
                    "{spec:?}"
                );
            }
        }
    }

    /// The fused chain's `seed_next`: aligned pointer and a whole draw position.
    #[test]
    fn launcher_check_of_seed_next() {
        let spec = base();
        let problem = validate(&spec).unwrap();
        let p = fill_params(&spec, &problem, 0, true, true, Algorithm::Auto).unwrap();
        let mut p = with_fake_pointers(p, &spec);
        let check = |p: &sys::mamba_ssu_params| {
            // SAFETY: the check only reads `p` (pointer values included, never the memory
            // they point to).
            ffi::check(unsafe { sys::mamba_ssu_selective_state_update_check(p) })
                .map_err(|e| e.to_string())
        };
        p.seed_next = 0x2000_0000usize as *mut i64;
        p.seed_offset = 8;
        assert_eq!(check(&p), Ok(()));
        p.seed_next = 0x2000_0004usize as *mut i64;
        assert!(check(&p).unwrap_err().contains("seed_next"), "misaligned");
        p.seed_next = 0x2000_0000usize as *mut i64;
        p.seed_offset = 6;
        assert!(check(&p).unwrap_err().contains("seed_offset"), "offset % 4");
    }

    #[test]
    fn params_carry_the_spec() {
        let spec = with(|s| s.seed = Some(SeedSpec::FromGenerator { offset: 40 }));
        let problem = validate(&spec).unwrap();
        let p = fill_params(&spec, &problem, 7, true, false, Algorithm::Vertical).unwrap();
        assert_eq!(
            (p.batch, p.nheads, p.dim, p.dstate, p.ngroups),
            (2, 4, 8, 64, 2)
        );
        assert_eq!(p.state_cache_size, SLOTS as i64);
        assert_eq!(p.state_stride_batch, SLOT_STRIDE as i64);
        assert_eq!(
            (p.x_stride_batch, p.dt_stride_batch, p.B_stride_batch),
            (32, 4, 128)
        );
        assert_eq!((p.pad_slot_id, p.dt_softplus, p.update_state), (7, 1, 0));
        assert_eq!(p.seed_source, sys::MAMBA_SSU_SEED_FROM_GENERATOR as i32);
        assert_eq!((p.seed_offset, p.philox_rounds), (40, 10));
        assert_eq!(p.algorithm, sys::MAMBA_SSU_ALGO_VERTICAL as i32);
        assert_eq!(
            (p.state_dtype, p.input_dtype),
            (DType::F16.ffi(), DType::BF16.ffi())
        );
        assert_eq!(p.sr_rule, sys::MAMBA_SSU_SR_V072 as i32, "the default rule");
        let spec = with(|s| s.sr_rule = SrRule::V074);
        let p = fill_params(
            &spec,
            &validate(&spec).unwrap(),
            0,
            true,
            true,
            Algorithm::Auto,
        )
        .unwrap();
        assert_eq!(p.sr_rule, sys::MAMBA_SSU_SR_V074 as i32);
        let spec = with(|s| {
            s.seed = Some(SeedSpec::FromValues {
                seed: 0xDEAD_BEEF_0123,
                offset: 96,
            })
        });
        let p = fill_params(
            &spec,
            &validate(&spec).unwrap(),
            0,
            true,
            true,
            Algorithm::Simple,
        )
        .unwrap();
        assert_eq!(p.seed_source, sys::MAMBA_SSU_SEED_FROM_VALUES as i32);
        assert_eq!((p.generator_seed, p.seed_offset), (0xDEAD_BEEF_0123, 96));
        // Rounds 0: the seed is ignored and not passed.
        let spec = with(|s| s.philox_rounds = 0);
        let p = fill_params(
            &spec,
            &validate(&spec).unwrap(),
            0,
            false,
            true,
            Algorithm::Auto,
        )
        .unwrap();
        assert_eq!(
            (p.philox_rounds, p.seed_source),
            (0, sys::MAMBA_SSU_SEED_POINTER as i32)
        );
    }
}
