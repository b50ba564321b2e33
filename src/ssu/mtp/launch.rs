//! The launch: [`selective_state_update_mtp`] validates, checks devices and pointer alignment,
//! fills the C ABI's `mamba_ssu_mtp_params` (`fill_params`) and enqueues the call through
//! `mamba_ssu_selective_state_update_mtp`; [`mtp_launch_plan`] asks the C planner for the
//! launch configuration of a call.

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaStream, DevicePtr};

use crate::device::check_same_device;
use crate::error::{Error, Result};
use crate::ffi::{self, sys};
use crate::reference::SrRule;
use crate::ssu::launch::{
    check_ptr_alignment, check_seed_device, raw, seed_fields, set_seed_fields, to_i64,
};
use crate::ssu::{SeedSource, SeedSpec};
use crate::tensor::{DType, Tensor, TensorLayout, VECTOR_ALIGN};

use super::args::{MtpArgs, MtpLaunchPlan, MtpProblem, MtpSpec};
use super::validation::validate_mtp;

/// The argument a C check's detail names (its text up to the first `:`), as a static name.
fn c_argument(detail: &str) -> &'static str {
    const NAMES: [&str; 58] = [
        "params",
        "batch",
        "ntokens",
        "total_tokens",
        "nheads",
        "dim",
        "dstate",
        "ngroups",
        "state_cache_size",
        "cache_steps",
        "intermediate_cache_size",
        "state_dtype",
        "input_dtype",
        "weight_dtype",
        "index_dtype",
        "sr_rule",
        "seed_source",
        "philox_rounds",
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
        "intermediate_states",
        "generator_seed_ptr/generator_offset_ptr",
        "generator_seed_ptr",
        "generator_offset_ptr",
        "seed_next",
        "generator_state",
        "rand_seed",
        "seed_offset",
        "state_batch_indices",
        "dst_state_batch_indices",
        "num_accepted_tokens",
        "cu_seqlens",
        "intermediate_state_indices",
        "state_batch_indices_cols",
        "state_batch_indices_stride",
        "state_batch_indices_stride_col",
        "dst_state_batch_indices_stride",
        "dst_state_batch_indices_stride_col",
        "num_accepted_tokens_stride",
        "cu_seqlens_stride",
        "intermediate_state_indices_stride",
        "state_stride_batch",
        "x_stride_batch",
        "x_stride_token",
        "B_stride_batch",
        "B_stride_token",
        "C_stride_batch",
        "C_stride_token",
        "out_stride_batch",
        "out_stride_token",
    ];
    let head = detail.split(':').next().unwrap_or("").trim();
    NAMES
        .iter()
        .find(|n| **n == head)
        .copied()
        .unwrap_or("arguments")
}

/// A C status as [`Error::InvalidArgument`] / [`Error::Unsupported`] naming the argument the
/// detail names (other statuses as [`crate::ffi::check`] maps them).
fn check_status(status: i32) -> Result<()> {
    match ffi::check(status) {
        Ok(()) => Ok(()),
        Err(Error::Launcher { status, detail, .. })
            if status == sys::MAMBA_SSU_ERROR_UNSUPPORTED as i32
                || status == sys::MAMBA_SSU_ERROR_INVALID_ARGUMENT as i32 =>
        {
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

/// `p` with placeholder device pointers (aligned, never dereferenced) for every tensor `spec`
/// has: what the pure C functions (check, plan) need.
pub(super) fn with_placeholders(
    mut p: sys::mamba_ssu_mtp_params,
    spec: &MtpSpec,
) -> sys::mamba_ssu_mtp_params {
    use std::ffi::c_void;
    let placeholder = |k: usize| (0x1000_0000usize + k * 0x1000) as *mut c_void;
    let opt = |present: bool, k: usize| {
        if present {
            placeholder(k) as *const c_void
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
    p.num_accepted_tokens = opt(spec.num_accepted_tokens.is_some(), 13);
    p.cu_seqlens = opt(spec.cu_seqlens.is_some(), 14);
    p.intermediate_states = opt(spec.intermediate_states_buffer.is_some(), 15) as *mut c_void;
    p.intermediate_state_indices = opt(spec.intermediate_state_indices.is_some(), 16);
    p.rand_seed = placeholder(17) as *const i64;
    p.generator_state = placeholder(18) as *const sys::mamba_ssu_generator_state;
    p
}

/// The C ABI's contract check (`mamba_ssu_selective_state_update_mtp_check`) of a call that
/// passed the Rust checks, with placeholder device pointers: the one contract both front
/// doors enforce.
pub(super) fn contract_check(spec: &MtpSpec, problem: &MtpProblem) -> Result<()> {
    let p = with_placeholders(
        fill_params(spec, problem, -1, true, true, SrRule::V072)?,
        spec,
    );
    // SAFETY: the check reads `p` only (pointer values included, never the memory behind them).
    check_status(unsafe { sys::mamba_ssu_selective_state_update_mtp_check(&p) })
}

/// The launch configuration [`selective_state_update_mtp`] would use for a call of these
/// layouts on a device of `num_sms` multiprocessors (>= 1): validates `spec`
/// ([`validate_mtp`]) and asks the C planner (`mamba_ssu_selective_state_update_mtp_plan`).
/// A pure function: no device is touched. The plan of a call with a fused seed chain
/// (`seed_next`) may hold one block more.
pub fn mtp_launch_plan(spec: &MtpSpec, num_sms: u32) -> Result<MtpLaunchPlan> {
    if num_sms == 0 || num_sms > i32::MAX as u32 {
        return Err(Error::invalid(
            "num_sms",
            format!("expected 1..={}, got {num_sms}", i32::MAX),
        ));
    }
    let problem = validate_mtp(spec)?;
    let mut p = with_placeholders(
        fill_params(spec, &problem, -1, true, true, SrRule::V072)?,
        spec,
    );
    p.num_sms = num_sms as i32;
    let mut plan = sys::mamba_ssu_launch_plan::default();
    // SAFETY: `p` is a checked parameter block whose pointers are never dereferenced; `plan`
    // is a valid output; with num_sms > 0 no device is queried.
    check_status(unsafe {
        sys::mamba_ssu_selective_state_update_mtp_plan(&p, num_sms as i32, &mut plan)
    })?;
    Ok(MtpLaunchPlan {
        grid_blocks: plan.grid_blocks.max(0) as u64,
        blocks_per_head: plan.blocks_per_head.max(0) as u64,
        threads_per_block: plan.threads_per_block.max(0) as u32,
        warps_per_block: plan.warps_per_block.max(0) as u32,
        rows_per_warp: plan.rows_per_warp.max(0) as u32,
        compiled_kernel: plan.compiled_kernel != 0,
        num_sms: plan.num_sms.max(0) as u32,
    })
}

/// `mamba_ssu_mtp_params` of a validated call, every pointer null (filled at launch).
pub(super) fn fill_params(
    spec: &MtpSpec,
    p: &MtpProblem,
    pad_slot_id: i64,
    dt_softplus: bool,
    update_state: bool,
    sr_rule: SrRule,
) -> Result<sys::mamba_ssu_mtp_params> {
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
    let varlen = p.total_tokens.is_some();
    // (batch stride, token stride) of a token tensor: fixed length (s0, s1); varlen (0, s0).
    let tok = |name: &'static str, l: &TensorLayout| -> Result<(i64, i64)> {
        let s = l.strides();
        if varlen {
            Ok((0, to_i64(name, s[0])?))
        } else {
            Ok((to_i64(name, s[0])?, to_i64(name, s[1])?))
        }
    };
    // (stride, column stride, columns) of an index tensor: 1-D (s0, 0, 0), 2-D (s0, s1, n1).
    let idx = |name: &'static str, l: &Option<TensorLayout>| -> Result<(i64, i64, i64)> {
        match l {
            None => Ok((0, 0, 0)),
            Some(l) if l.rank() == 2 => Ok((
                to_i64(name, l.strides()[0])?,
                to_i64(name, l.strides()[1])?,
                to_i64(name, l.shape()[1])?,
            )),
            Some(l) => Ok((to_i64(name, l.strides()[0])?, 0, 0)),
        }
    };
    let (x_sb, x_st) = tok("x", &spec.x)?;
    let (dt_sb, dt_st) = tok("dt", &spec.dt)?;
    let (b_sb, b_st) = tok("B", &spec.b)?;
    let (c_sb, c_st) = tok("C", &spec.c)?;
    let (z_sb, z_st) = spec.z.as_ref().map_or(Ok((0, 0)), |z| tok("z", z))?;
    let (out_sb, out_st) = tok("out", &spec.out)?;
    let sbi = idx("state_batch_indices", &spec.state_batch_indices)?;
    let dst = idx("dst_state_batch_indices", &spec.dst_state_batch_indices)?;
    let nat = idx("num_accepted_tokens", &spec.num_accepted_tokens)?;
    let cu = idx("cu_seqlens", &spec.cu_seqlens)?;
    let isi = idx(
        "intermediate_state_indices",
        &spec.intermediate_state_indices,
    )?;
    let (entries, cache_steps) = p.intermediate.unwrap_or((0, 0));
    Ok(sys::mamba_ssu_mtp_params {
        batch: to_i64("x", p.batch)?,
        ntokens: to_i64("x", p.ntokens)?,
        total_tokens: to_i64("x", p.total_tokens.unwrap_or(0))?,
        nheads: to_i64("state", p.nheads)?,
        dim: to_i64("state", p.dim)?,
        dstate: to_i64("state", p.dstate)?,
        ngroups: to_i64("B", p.ngroups)?,
        state_cache_size: to_i64("state", p.cache_slots)?,
        cache_steps: to_i64("cache_steps", cache_steps)?,
        intermediate_cache_size: to_i64("intermediate_states_buffer", entries)?,
        state_stride_batch: to_i64("state", spec.state.strides()[0])?,
        x_stride_batch: x_sb,
        x_stride_token: x_st,
        dt_stride_batch: dt_sb,
        dt_stride_token: dt_st,
        B_stride_batch: b_sb,
        B_stride_token: b_st,
        C_stride_batch: c_sb,
        C_stride_token: c_st,
        z_stride_batch: z_sb,
        z_stride_token: z_st,
        out_stride_batch: out_sb,
        out_stride_token: out_st,
        state_batch_indices_stride: sbi.0,
        state_batch_indices_stride_col: sbi.1,
        state_batch_indices_cols: sbi.2,
        dst_state_batch_indices_stride: dst.0,
        dst_state_batch_indices_stride_col: dst.1,
        dst_state_batch_indices_cols: dst.2,
        num_accepted_tokens_stride: nat.0,
        cu_seqlens_stride: cu.0,
        intermediate_state_indices_stride: isi.0,
        pad_slot_id,
        state_dtype: p.state_dtype.ffi(),
        input_dtype: p.input_dtype.ffi(),
        weight_dtype: p.weight_dtype.ffi(),
        index_dtype: p.index_dtype.unwrap_or(DType::I32).ffi(),
        dt_softplus: i32::from(dt_softplus),
        update_state: i32::from(update_state),
        philox_rounds: if sr { spec.philox_rounds as i32 } else { 0 },
        sr_rule: match sr_rule {
            SrRule::V072 => sys::MAMBA_SSU_SR_V072,
            SrRule::V074 => sys::MAMBA_SSU_SR_V074,
        } as i32,
        seed_source: seed_source as i32,
        seed_offset,
        generator_seed,
        num_sms: 0,
        ..Default::default()
    })
}

/// Enqueues one multi-token selective-state-update on `stream`: validates `args`
/// ([`validate_mtp`]), checks that every buffer lives on the stream's device
/// ([`Error::WrongDevice`]) and that every tensor starts aligned as the kernel loads it, then
/// launches through the C launcher (`mamba_ssu_selective_state_update_mtp`).
///
/// Asynchronous on `stream`: it returns once the kernel is enqueued; `out`, `state` and the
/// intermediate buffer are written when the kernel runs. Nothing is launched when an error is
/// returned; a launcher failure is [`Error::Launcher`] with the launcher's detail.
pub fn selective_state_update_mtp(stream: &CudaStream, args: &mut MtpArgs<'_>) -> Result<()> {
    let spec = args.spec();
    let problem = validate_mtp(&spec)?;

    // Devices.
    check_same_device("state", stream, args.state.buffer_stream())?;
    check_same_device("out", stream, args.out.buffer_stream())?;
    if let Some(buf) = &args.intermediate_states_buffer {
        check_same_device("intermediate_states_buffer", stream, buf.buffer_stream())?;
    }
    let inputs: [(&'static str, Option<&Tensor<'_>>); 13] = [
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
        ("num_accepted_tokens", args.num_accepted_tokens.as_ref()),
        ("cu_seqlens", args.cu_seqlens.as_ref()),
        (
            "intermediate_state_indices",
            args.intermediate_state_indices.as_ref(),
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
        !args.disable_state_update,
        args.sr_rule,
    )?;
    let ctx = stream.context();
    ctx.bind_to_thread()?;
    params.num_sms = crate::ssu::args::num_sms(ctx)? as i32;

    // Device pointers; every guard lives until the launcher has returned.
    let (state_ptr, _state_guard) = args.state.device_ptr_mut(stream);
    let (out_ptr, _out_guard) = args.out.device_ptr_mut(stream);
    let buffer = args
        .intermediate_states_buffer
        .as_mut()
        .map(|t| t.device_ptr_mut(stream));
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
    let accepted = args
        .num_accepted_tokens
        .as_ref()
        .map(|t| t.device_ptr(stream));
    let cu = args.cu_seqlens.as_ref().map(|t| t.device_ptr(stream));
    let entry_idx = args
        .intermediate_state_indices
        .as_ref()
        .map(|t| t.device_ptr(stream));
    let seed = match (&args.seed, sr) {
        (Some(SeedSource::Pointer(t)), true) => Some(t.device_ptr(stream)),
        (Some(SeedSource::FromGenerator { state, .. }), true) => {
            Some(state.device_state().device_ptr(stream))
        }
        _ => None,
    };

    // Alignment: vector-loaded tensors 16 bytes, the others their element size.
    let elem = |d: DType| d.size_bytes();
    let index_align = elem(problem.index_dtype.unwrap_or(DType::I32));
    let buffer_ptr: CUdeviceptr = buffer.as_ref().map_or(0, |(p, _)| *p);
    for (name, ptr, align) in [
        ("state", state_ptr, VECTOR_ALIGN),
        ("intermediate_states_buffer", buffer_ptr, VECTOR_ALIGN),
        ("B", b_ptr, VECTOR_ALIGN),
        ("C", c_ptr, VECTOR_ALIGN),
        ("x", x_ptr, elem(problem.input_dtype)),
        ("z", raw(&z), elem(problem.input_dtype)),
        ("out", out_ptr, elem(problem.input_dtype)),
        ("dt", dt_ptr, elem(problem.weight_dtype)),
        ("D", raw(&d), elem(problem.weight_dtype)),
        ("dt_bias", raw(&dt_bias), elem(problem.weight_dtype)),
        ("A", a_ptr, 4),
        ("state_batch_indices", raw(&src_idx), index_align),
        ("dst_state_batch_indices", raw(&dst_idx), index_align),
        ("num_accepted_tokens", raw(&accepted), index_align),
        ("cu_seqlens", raw(&cu), index_align),
        ("intermediate_state_indices", raw(&entry_idx), index_align),
    ] {
        check_ptr_alignment(name, ptr, align)?;
    }

    use std::ffi::c_void;
    params.state = state_ptr as *mut c_void;
    params.out = out_ptr as *mut c_void;
    params.intermediate_states = buffer_ptr as *mut c_void;
    params.x = x_ptr as *const c_void;
    params.dt = dt_ptr as *const c_void;
    params.A = a_ptr as *const f32;
    params.B = b_ptr as *const c_void;
    params.C = c_ptr as *const c_void;
    params.D = raw(&d) as *const c_void;
    params.z = raw(&z) as *const c_void;
    params.dt_bias = raw(&dt_bias) as *const c_void;
    params.state_batch_indices = raw(&src_idx) as *const c_void;
    params.dst_state_batch_indices = raw(&dst_idx) as *const c_void;
    params.num_accepted_tokens = raw(&accepted) as *const c_void;
    params.cu_seqlens = raw(&cu) as *const c_void;
    params.intermediate_state_indices = raw(&entry_idx) as *const c_void;
    set_seed_fields!(params, seed_fields(args.seed.as_ref(), raw(&seed), sr));

    // SAFETY: every pointer in `params` is null (an absent optional tensor) or the start of a
    // live device buffer on the stream's device (checked above), held by a guard that is
    // dropped only after this call returns; `validate_mtp` proved that every element the
    // kernel can address (shape, strides, dtype) lies inside its buffer and that the layouts
    // are the launcher's contract. Index values (slots, entries, offsets, counts) are device
    // data the kernel range-checks. `params` outlives the call, which copies it.
    let status =
        unsafe { sys::mamba_ssu_selective_state_update_mtp(ffi::stream_handle(stream), &params) };
    ffi::check(status)
}
