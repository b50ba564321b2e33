//! `mtp_bench`: multi-token (speculative-decoding verify) SSU timings, measured like
//! FlashInfer's recorded ones (tests/data/flashinfer_ssu_mtp/timings.json, embedded) and printed
//! side by side with them.
//!
//! Shapes (Nemotron-H verify with 7 draft tokens): T = 8, fp16 state, bf16 x/B/C/dt/D/dt_bias,
//! fp32 A, dim 64, dstate 128, ngroups 8, no z, softplus, int32 indices; nheads 32 and 128;
//! batch 1..64; SR off, 5 and 10 Philox rounds. `--dim` and `--dstate` measure other head
//! dimensions and state sizes (Nemotron Nano 2 and Nemotron 3 Nano 4B: dim 80), one table per
//! (dim, dstate). FlashInfer's timings were recorded at dim 64 and dstate 128 only: at any
//! other shape its columns show "—" (none recorded), never the figure of another shape, and
//! the table's heading says so. Two forms:
//! - `dense`: FlashInfer's recorded form (sglang, TensorRT-LLM): x (batch, 8, nheads, 64), the
//!   intermediate buffer (entries, 8, nheads, 64, 128) with `intermediate_state_indices`,
//!   `cache_steps` 8 (every token's state to the buffer, the state itself not written);
//! - `varlen`: vLLM's in-place form: x (batch * 8, nheads, 64) with `cu_seqlens`, a 2-D
//!   `state_batch_indices` (batch, 8) passed as the dst index too, `num_accepted_tokens` (the
//!   read slot is column num_accepted - 1), pad 0; every token's state to its own slot.
//!
//! Method: a CUDA graph of K back-to-back calls whose indices rotate over enough disjoint state
//! copies (and buffer entries) that >= 192 MiB of other traffic passes between two uses of a
//! copy (state read from HBM, writes to cold lines); 2 warm-up replays, then the median of 15
//! replays timed with CUDA events, divided by K. Bytes = state read once + 8 state writes + x,
//! out, B, C, dt, A, D, dt_bias, indices, at the measured dim and dstate (`mtp_bench/rig.rs`).
//! Bandwidth as % of a 1 GiB memset (write only) timed in
//! the same run: `%mset` = all those bytes per second over the memset's (the definition of
//! FlashInfer's recorded `pct_of_memset_bw`), `%wr` = the 8 state writes alone.
//!
//! Usage: `cargo bench --bench mtp_bench -- [--quick] [--nheads 32,128] [--batch 1,8,64]
//! [--dim 64,80] [--dstate 128] [--rounds 0,5,10] [--forms dense,varlen] [--calls K]
//! [--json PATH]`, or the binary that `cargo bench --no-run --bench mtp_bench` builds, run by
//! hand. Without a GPU it prints one line and exits 0; bad arguments: clap's message and exit
//! code 2; a failure: one line and 1. The argument parsing, the byte counts and the FlashInfer
//! lookup are tested in `tests/bench_programs.rs`.

use std::error::Error;
use std::sync::Arc;

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use half::{bf16, f16};
use mamba_ssu::ssu::{self, MtpArgs, SeedSource, Tensor, TensorMut};
use serde_json::{json, Value};

#[path = "mtp_bench/args.rs"]
mod args;
#[path = "mtp_bench/rig.rs"]
mod rig;

use args::{Cli, Form};
use rig::{Sizes, NGROUPS, REPLAYS, T, TIMINGS, WARMUPS};

type Res<T> = Result<T, Box<dyn Error>>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

fn event(ctx: &Arc<CudaContext>) -> Res<cudarc::driver::CudaEvent> {
    Ok(ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?)
}

/// Median write bandwidth (GB/s) of a 1 GiB memset.
fn memset_bandwidth(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Res<f64> {
    let bytes = 1usize << 30;
    let mut buf = stream.alloc_zeros::<u8>(bytes)?;
    let (start, end) = (event(ctx)?, event(ctx)?);
    let mut ms = Vec::new();
    for i in 0..(WARMUPS + REPLAYS) {
        start.record(stream)?;
        stream.memset_zeros(&mut buf)?;
        end.record(stream)?;
        let t = start.elapsed_ms(&end)? as f64;
        if i >= WARMUPS {
            ms.push(t);
        }
    }
    Ok(bytes as f64 / (median(ms) * 1e-3) / 1e9)
}

struct Setup {
    form: Form,
    sz: Sizes,
    copies: usize,
    calls: usize,
    state: CudaSlice<f16>,
    inter: Option<CudaSlice<f16>>,
    x: CudaSlice<bf16>,
    b: CudaSlice<bf16>,
    c: CudaSlice<bf16>,
    dt: CudaSlice<bf16>,
    a: CudaSlice<f32>,
    d: CudaSlice<bf16>,
    dt_bias: CudaSlice<bf16>,
    out: CudaSlice<bf16>,
    seed: CudaSlice<i64>,
    /// Per copy: dense: (state_batch_indices, intermediate_state_indices); varlen: the 2-D
    /// index (read and dst) and the same again (unused).
    indices: Vec<(CudaSlice<i32>, CudaSlice<i32>)>,
    cu_seqlens: CudaSlice<i32>,
    num_accepted: CudaSlice<i32>,
}

fn wave(i: usize) -> f32 {
    ((i * 40_503) % 1001) as f32 / 1000.0 - 0.5
}

fn fill_bf16(n: usize, f: impl Fn(usize) -> f32) -> Vec<bf16> {
    (0..n).map(|i| bf16::from_f32(f(i))).collect()
}

fn setup(stream: &Arc<CudaStream>, form: Form, sz: Sizes, min_calls: usize) -> Res<Setup> {
    let Sizes {
        nheads,
        batch,
        dim,
        dstate,
    } = sz;
    let head_block = sz.head_block();
    // Copies so that a copy is reused only after ROTATION_BYTES of other traffic.
    let (copies, calls) = rig::rotation(&sz, min_calls);
    // State slots: dense: one read slot per sequence and copy; varlen: T slots per sequence
    // and copy (token t writes its own slot; the read slot is one of them).
    let slots_per_copy = if form == Form::Dense {
        batch
    } else {
        batch * T
    };
    // Slot 0 of the varlen form is vLLM's null block (pad 0): one more slot, never written.
    let first = usize::from(form == Form::Varlen);
    let slots = first + copies * slots_per_copy;
    let copy_host: Vec<f16> = (0..slots_per_copy * head_block)
        .map(|i| f16::from_f32(((i * 2_654_435_761) % 2001) as f32 / 2000.0 - 0.5))
        .collect();
    let mut state = stream.alloc_zeros::<f16>(slots * head_block)?;
    for k in 0..copies {
        let at = (first + k * slots_per_copy) * head_block;
        stream.memcpy_htod(&copy_host, &mut state.slice_mut(at..at + copy_host.len()))?;
    }
    let inter = if form == Form::Dense {
        Some(stream.alloc_zeros::<f16>(copies * batch * T * head_block)?)
    } else {
        None
    };
    let mut indices = Vec::with_capacity(copies);
    for k in 0..copies {
        let (a, b): (Vec<i32>, Vec<i32>) = if form == Form::Dense {
            let v: Vec<i32> = (0..batch).map(|b| (k * batch + b) as i32).collect();
            (v.clone(), v)
        } else {
            let v: Vec<i32> = (0..batch * T)
                .map(|j| (k * batch * T + j + 1) as i32)
                .collect();
            (v.clone(), v)
        };
        indices.push((stream.clone_htod(&a)?, stream.clone_htod(&b)?));
    }
    let cu: Vec<i32> = (0..=batch).map(|b| (b * T) as i32).collect();
    // Accepted tokens cycle through 1..=T, so read slots vary over the sequence's row.
    let accepted: Vec<i32> = (0..batch).map(|b| (b % T) as i32 + 1).collect();
    Ok(Setup {
        form,
        sz,
        copies,
        calls,
        state,
        inter,
        x: stream.clone_htod(&fill_bf16(batch * T * nheads * dim, wave))?,
        b: stream.clone_htod(&fill_bf16(batch * T * NGROUPS * dstate, wave))?,
        c: stream.clone_htod(&fill_bf16(batch * T * NGROUPS * dstate, wave))?,
        dt: stream.clone_htod(&fill_bf16(batch * T * nheads, |i| wave(i) - 1.0))?,
        a: stream.clone_htod(
            &(0..nheads)
                .map(|i| -0.5 - wave(i).abs())
                .collect::<Vec<f32>>(),
        )?,
        d: stream.clone_htod(&fill_bf16(nheads, |i| 1.0 + wave(i) / 4.0))?,
        dt_bias: stream.clone_htod(&fill_bf16(nheads, |i| wave(i) / 4.0))?,
        out: stream.alloc_zeros(batch * T * nheads * dim)?,
        seed: stream.clone_htod(&[0x5DEA_DBEEF_i64])?,
        indices,
        cu_seqlens: stream.clone_htod(&cu)?,
        num_accepted: stream.clone_htod(&accepted)?,
    })
}

/// Enqueues call `k` of the rotation.
fn enqueue(stream: &Arc<CudaStream>, s: &mut Setup, k: usize, rounds: u32) -> Res<()> {
    let Sizes {
        nheads: h,
        batch: b,
        dim,
        dstate,
    } = s.sz;
    let hb = s.sz.head_block();
    let copy = k % s.copies;
    let slots = s.state.len() / hb;
    let state = TensorMut::new(
        &mut s.state,
        &[slots, h, dim, dstate],
        &[hb, dim * dstate, dstate, 1],
    )?;
    let a = Tensor::new(&s.a, &[h, dim, dstate], &[1, 0, 0])?;
    let (idx, idx2) = &s.indices[copy];
    let mut args = match s.form {
        Form::Dense => {
            let tok = h * dim;
            MtpArgs::new(
                state,
                Tensor::new(&s.x, &[b, T, h, dim], &[T * tok, tok, dim, 1])?,
                Tensor::new(&s.dt, &[b, T, h, dim], &[T * h, h, 1, 0])?,
                a,
                Tensor::new(
                    &s.b,
                    &[b, T, NGROUPS, dstate],
                    &[T * NGROUPS * dstate, NGROUPS * dstate, dstate, 1],
                )?,
                Tensor::new(
                    &s.c,
                    &[b, T, NGROUPS, dstate],
                    &[T * NGROUPS * dstate, NGROUPS * dstate, dstate, 1],
                )?,
                TensorMut::new(&mut s.out, &[b, T, h, dim], &[T * tok, tok, dim, 1])?,
            )
            .state_batch_indices(Tensor::new(idx, &[b], &[1])?)
            .intermediate_states(TensorMut::contiguous(
                s.inter.as_mut().expect("dense form has a buffer"),
                &[s.copies * b, T, h, dim, dstate],
            )?)
            .intermediate_state_indices(Tensor::new(idx2, &[b], &[1])?)
            .cache_steps(T)
        }
        Form::Varlen => {
            let tok = h * dim;
            MtpArgs::new(
                state,
                Tensor::new(&s.x, &[b * T, h, dim], &[tok, dim, 1])?,
                Tensor::new(&s.dt, &[b * T, h, dim], &[h, 1, 0])?,
                a,
                Tensor::new(
                    &s.b,
                    &[b * T, NGROUPS, dstate],
                    &[NGROUPS * dstate, dstate, 1],
                )?,
                Tensor::new(
                    &s.c,
                    &[b * T, NGROUPS, dstate],
                    &[NGROUPS * dstate, dstate, 1],
                )?,
                TensorMut::new(&mut s.out, &[b * T, h, dim], &[tok, dim, 1])?,
            )
            .state_batch_indices(Tensor::new(idx, &[b, T], &[T, 1])?)
            .dst_state_batch_indices(Tensor::new(idx, &[b, T], &[T, 1])?)
            .num_accepted_tokens(Tensor::new(&s.num_accepted, &[b], &[1])?)
            .cu_seqlens(Tensor::new(&s.cu_seqlens, &[b + 1], &[1])?)
            .cache_steps(T)
            .pad_slot_id(0)
        }
    }
    .d(Tensor::new(&s.d, &[h, dim], &[1, 0])?)
    .dt_bias(Tensor::new(&s.dt_bias, &[h, dim], &[1, 0])?)
    .dt_softplus(true);
    if rounds > 0 {
        args = args.stochastic_rounding(
            SeedSource::Pointer(Tensor::new(&s.seed, &[1], &[1])?),
            rounds,
        );
    }
    ssu::selective_state_update_mtp(stream, &mut args)?;
    Ok(())
}

/// µs per call (median over replays).
fn time_config(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    s: &mut Setup,
    rounds: u32,
) -> Res<f64> {
    // One eager call first: argument errors surface here, outside the capture.
    enqueue(stream, s, 0, rounds)?;
    stream.synchronize()?;
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let mut captured = Ok(());
    for k in 0..s.calls {
        captured = enqueue(stream, s, k, rounds);
        if captured.is_err() {
            break;
        }
    }
    let graph = stream.end_capture(CUgraphInstantiate_flags(0))?;
    captured?;
    let graph = graph.ok_or("stream capture produced no graph")?;
    graph.upload()?;
    let (start, end) = (event(ctx)?, event(ctx)?);
    let mut ms = Vec::new();
    for i in 0..(WARMUPS + REPLAYS) {
        start.record(stream)?;
        graph.launch()?;
        end.record(stream)?;
        let t = start.elapsed_ms(&end)? as f64;
        if i >= WARMUPS {
            ms.push(t);
        }
    }
    stream.synchronize()?;
    Ok(median(ms) * 1e3 / s.calls as f64)
}

fn run(cli: &Cli) -> Res<()> {
    let Some((ctx, stream)) = open()? else {
        println!("mtp_bench: no CUDA device; nothing measured");
        return Ok(());
    };
    // SAFETY: every buffer is used on `stream` only, so cudarc's per-buffer event tracking is
    // not needed; it would also record events on other streams during the capture.
    unsafe { ctx.disable_event_tracking() };
    let timings: Value = serde_json::from_str(TIMINGS)?;
    let recorded = rig::recorded_shape(&timings).ok_or("timings.json names no dim/dstate")?;
    let forms = cli.forms.clone();
    let sizes: Vec<(usize, usize)> = if cli.quick {
        vec![(32, 1), (32, 8), (128, 64)]
    } else {
        cli.nheads
            .iter()
            .flat_map(|&h| cli.batch.iter().map(move |&b| (h, b)))
            .collect()
    };
    let shapes: Vec<(usize, usize)> = cli
        .dim
        .iter()
        .flat_map(|&d| cli.dstate.iter().map(move |&s| (d, s)))
        .collect();
    let memset = memset_bandwidth(&ctx, &stream)?;
    let name = ctx.name().unwrap_or_default();
    if let [(dim, dstate)] = shapes[..] {
        println!("mtp_bench: {name}; memset {memset:.0} GB/s; T = {T}, dim {dim}, dstate {dstate}, ngroups {NGROUPS}");
    } else {
        println!("mtp_bench: {name}; memset {memset:.0} GB/s; T = {T}, ngroups {NGROUPS}");
    }
    let mut rows = Vec::new();
    for (k, &(dim, dstate)) in shapes.iter().enumerate() {
        if let Some(h) = rig::shape_heading(recorded, &shapes, dim, dstate) {
            let gap = if k > 0 { "\n" } else { "" };
            println!("{gap}{h}");
        }
        let none = rig::missing(recorded, dim, dstate);
        println!(
            "{:<7} {:>6} {:>5} {:>6} {:>9} {:>7} {:>7} {:>7} {:>9} {:>7} {:>8}",
            "form",
            "nheads",
            "batch",
            "rounds",
            "us",
            "TB/s",
            "%mset",
            "%wr",
            "FI us",
            "FI/us",
            "SR/off"
        );
        for &form in &forms {
            for &(nheads, batch) in &sizes {
                let sz = Sizes {
                    nheads,
                    batch,
                    dim,
                    dstate,
                };
                let mut s = setup(&stream, form, sz, cli.calls)?;
                let mut off_us = None;
                for &rounds in &cli.rounds {
                    let us = time_config(&ctx, &stream, &mut s, rounds)?;
                    if rounds == 0 {
                        off_us = Some(us);
                    }
                    let bytes = sz.bytes_per_call() as f64;
                    let tbs = bytes / (us * 1e-6) / 1e12;
                    let write_gbs = sz.state_write_bytes() as f64 / (us * 1e-6) / 1e9;
                    let (pct, write_pct) = (100.0 * tbs * 1e3 / memset, 100.0 * write_gbs / memset);
                    let (fi, fi_none) = if form == Form::Dense {
                        (rig::flashinfer_us(&timings, rounds, &sz), none)
                    } else {
                        (None, "-")
                    };
                    let sr_ratio = off_us.filter(|_| rounds > 0).map(|o| us / o);
                    println!(
                        "{:<7} {:>6} {:>5} {:>6} {:>9.2} {:>7.2} {:>6.1}% {:>6.1}% {:>9} {:>7} {:>8}",
                        if form == Form::Dense {
                            "dense"
                        } else {
                            "varlen"
                        },
                        nheads,
                        batch,
                        rounds,
                        us,
                        tbs,
                        pct,
                        write_pct,
                        fi.map_or(fi_none.into(), |f| format!("{f:.2}")),
                        fi.map_or(fi_none.into(), |f| format!("{:.2}x", f / us)),
                        sr_ratio.map_or("-".into(), |r| format!("{r:.2}x")),
                    );
                    rows.push(json!({
                        "form": if form == Form::Dense { "dense" } else { "varlen" },
                        "nheads": nheads, "dim": dim, "dstate": dstate, "batch": batch,
                        "philox_rounds": rounds, "T": T,
                        "us_median": us, "TBps": tbs, "pct_of_memset": pct,
                        "write_GBps": write_gbs,
                        "write_pct_of_memset": write_pct,
                        "state_write_bytes": sz.state_write_bytes(),
                        "calls_per_graph": s.calls, "state_copies_rotated": s.copies,
                        "flashinfer_us": fi, "sr_over_off": sr_ratio,
                    }));
                }
            }
        }
    }
    if let Some(path) = &cli.json {
        let doc = json!({"gpu": name, "memset_GBps": memset, "records": rows});
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)?;
        println!("mtp_bench: wrote {path}");
    }
    Ok(())
}

fn open() -> Res<Option<(Arc<CudaContext>, Arc<CudaStream>)>> {
    match mamba_ssu::device::open(0) {
        Ok(ctx) => {
            let stream = ctx.new_stream()?;
            Ok(Some((ctx, stream)))
        }
        Err(_) => Ok(None),
    }
}

fn main() {
    let cli = match args::parse_from(std::env::args_os()) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    if let Err(e) = run(&cli) {
        println!("mtp_bench: error: {e}");
        std::process::exit(1);
    }
}
